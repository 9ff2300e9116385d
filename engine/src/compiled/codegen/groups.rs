//! The fused group functions of the list and mask walks.
//!
//! Depths are fused into groups of `group` cells: one `#[inline(never)]` function per
//! group whose body nests one candidate loop per depth, so a call happens once per group.
//! When a key's neighbour was placed by an enclosing loop of the same function, its colour
//! comes from that loop's candidate register instead of a board load. One countdown
//! decrement per node covers the budget, progress and the stop flag; the board is never
//! cleared on backtrack (a cell is only read while placed).
//!
//! Names in the generated code (`d` a depth):
//!
//! | name | what it holds |
//! |---|---|
//! | `g{d}(st)` | the group function whose first depth (head) is `d`; true when the unit stops |
//! | `st` | the program's state (`St`, the static `ST`) |
//! | `k{d}` | depth `d`'s key: its index into `OFFS`, `FIRST`, `MASK` and `BLOCK` |
//! | `c{d}` | the candidate in hand at depth `d` |
//! | `p{d}` | its piece (the used-set index) |
//! | `u_in`, `u{d}` | on boards with a used mask, the free pieces at the function's entry and after depth `d` placed its piece |
//! | `HEADS` | per depth, the group function headed there (`None` inside a group): where the runtime's cold `scan` hands over |
//!
//! A unit that starts or resumes inside a group (a prefix or cursor ending mid-group, the
//! untried siblings of a cursor placement) runs the runtime's table-driven `scan(st,
//! depth, start)`, which hands over to the fused chain at the next head: cold code, kept
//! generic so it costs no compile time per depth.
use std::fmt::Write;

use super::tables::BucketWalk;
use super::{Gen, MODULES};

impl Gen<'_> {
    /// The expression for key read `k` (0 or 1) of depth `d`, given which depths of the
    /// current function hold their candidate in a local (`c{depth}`).
    pub(super) fn key_expr(&self, d: usize, k: usize, locals: &[usize]) -> String {
        let dp = &self.plan.depths[d];
        let read = dp.key[k];
        if read.cell == self.plan.cells {
            return "0usize".into();
        }
        if let Some(&src) = locals
            .iter()
            .find(|&&l| self.plan.depths[l].pos == read.cell)
        {
            return format!(
                "((c{src} >> {}) & 0xFF) as usize",
                self.layout.at(read.shift)
            );
        }
        format!(
            "((st.cells[{}][0] >> {}) & 0xFF) as usize",
            read.cell,
            self.layout.at(read.shift)
        )
    }

    /// The index into `OFFS` (and the mask walk's tables) of depth `d`'s bucket.
    pub(super) fn key_index_expr(&self, d: usize, locals: &[usize]) -> String {
        let dp = &self.plan.depths[d];
        let a = self.key_expr(d, 0, locals);
        let b = self.key_expr(d, 1, locals);
        format!(
            "{} + (({a}) << {}) + {b}",
            self.table_offset(dp.table),
            self.stride_log2()
        )
    }

    pub(super) fn bucket_expr(&self, d: usize, locals: &[usize]) -> String {
        format!("OFFS[{}] as usize", self.key_index_expr(d, locals))
    }

    /// ` && (the extra sides of candidate `var` match)`, or nothing for a depth without
    /// extra sides.
    pub(super) fn extra_check(&self, d: usize, var: &str) -> String {
        let dp = &self.plan.depths[d];
        if dp.extra_mask == 0 {
            return String::new();
        }
        // as the program lays the candidate out: a `u32` where the sides fit one
        let at = |side: usize| self.layout.at(8 * side as u32);
        let mask = dp.extra.iter().fold(0u64, |m, &(_, s)| m | 0xFF << at(s));
        let ty = if mask > u64::from(u32::MAX) {
            "u64"
        } else {
            "u32"
        };
        let mut expect = format!("0{ty}");
        for &(read, side) in &dp.extra {
            let _ = write!(
                expect,
                " | ((((st.cells[{}][0] >> {}) & 0xFF) as {ty}) << {})",
                read.cell,
                self.layout.at(read.shift),
                at(side)
            );
        }
        format!(" && ({var} as {ty} & {mask:#x}) == ({expect})")
    }

    /// Whether group functions hold the used mask in a register (as its complement:
    /// `u_in` at entry, `u{d}` after depth `d` places its piece) and write it to
    /// `st.umask` only when they call out and when they return: every board with a used
    /// mask. Two-word boards first, where reading both words of `st.umask` right after a
    /// store into one of them cost more than it saved (Brendan set 2 10x10: 78-82 M
    /// nodes/s from memory, 98-112 from registers); one-word boards too (a `u64`
    /// register: set 1 8x8 1.044x, set 2 7x7 1.024x, 5 alternated rounds).
    ///
    /// What they hold is the complement of `st.umask`, the free pieces: a level's walk is
    /// `MASK & free` and its mark `free & !bit` (`btr`). Holding the used pieces, LLVM
    /// computed the `not` of every level's `u128` mask up front and kept it in a spill
    /// slot of its own; on one-word boards `andn` reads the bucket mask against the used
    /// register in one instruction, but the free mask still won on five of the six
    /// one-word Brendan boards. Instructions per node, x86-64-v3 build, used -> free: set
    /// 1 9x9 37.7 -> 36.9, set 2 10x10 37.2 -> 35.9; set 1 6x6 32.3 -> 31.1, set 2 6x6
    /// 32.1 -> 31.0, set 2 7x7 34.4 -> 34.2, set 1 8x8 34.9 -> 33.8, set 2 8x8 34.8 ->
    /// 33.7; set 1 7x7 29.8 -> 31.2.
    pub(super) fn held(&self) -> bool {
        self.mask_words() >= 1
    }

    /// The register holding the used (or free) pieces before depth `d` places its piece.
    pub(super) fn held_before(&self, d: usize) -> String {
        if self.is_head(d) {
            "u_in".into()
        } else {
            format!("u{}", d - 1)
        }
    }

    /// The statement that marks piece `p{d}` on (`on`) or off the board: its used byte, or
    /// on boards with a used mask its bit there (the runtime reads the same record), or
    /// the next register of the mask when it is held (off is then nothing to do).
    pub(super) fn mark(&self, d: usize, on: bool) -> String {
        if self.held() {
            if !on {
                return String::new();
            }
            // a windowed level's bit is `b{d}` above its constant `low`: a u64 shift and
            // constant u128 shifts, where `1u128 << p{d}` shifts by a variable across
            // both words (Brendan set 1 10x10: 1.09x, 7 alternated rounds)
            // on a split mask a level's bit is in one word: the low one's as it is, the
            // high one's shifted a whole word
            let bit = match self.walks[&self.plan.depths[d].table] {
                BucketWalk::Mask {
                    window: Some(low), ..
                } if self.split < 64 => match low < self.split {
                    true => format!("((1u64 << p{d}) as u128)"),
                    false => format!("(((1u64 << b{d}) as u128) << 64)"),
                },
                BucketWalk::Mask {
                    window: Some(low), ..
                } => format!("(((1u64 << b{d}) as u128) << {low})"),
                _ => format!("(1u128 << p{d})"),
            };
            let held = self.held_before(d);
            let ty = if self.mask_words() == 1 {
                "u64"
            } else {
                "u128"
            };
            let bit = if self.mask_words() == 1 {
                format!("(1u64 << p{d})")
            } else {
                bit
            };
            return format!("let u{d}: {ty} = {held} & !{bit};");
        }
        format!("st.used[p{d}] = {};", u8::from(on))
    }

    /// Whether piece `p{d}` is on the board, as the record [`Gen::mark`] keeps.
    pub(super) fn is_used(&self, d: usize) -> String {
        // only list levels ask, and a split mask has none (`Gen::split_mask`), so the
        // held bit of piece `p` is bit `p`
        debug_assert_eq!(self.split, 64);
        if self.held() {
            return format!("({} >> p{d}) & 1 == 0", self.held_before(d));
        }
        format!("st.used[p{d}] != 0")
    }

    /// The body that commits candidate `c{d}` at depth `d` (after the used test).
    pub(super) fn commit(&self, d: usize) -> String {
        let dp = &self.plan.depths[d];
        let leaf = d + 1 == self.plan.len();
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{mark} st.cells[{pos}][0] = c{d}; st.cells[{pos}][1] = st.cells[{pos}][1].wrapping_add(1);\n\
             if st.cells[{pos}][1] == 0 {{ st.first_visit({d}); }}",
            mark = self.mark(d, true),
            pos = dp.pos
        );
        if leaf {
            s.push_str("st.solution();\n");
        }
        let _ = writeln!(
            s,
            "st.left -= 1; if st.left == 0 && st.slow({d}) {{ return true; }}"
        );
        s
    }

    /// One loop level at depth `d` over the bucket at `OFFS` index `key`; `inner` runs
    /// after the commit (the deeper levels or the call onward).
    /// `next_y`: when depth `d + 1` is chained ([`Chain`]), its key's other colour.
    pub(super) fn level(&self, d: usize, key: &str, inner: &str, next_y: Option<&str>) -> String {
        let leaf = d + 1 == self.plan.len();
        let onward = if leaf {
            String::new()
        } else {
            inner.to_string()
        };
        match self.walks[&self.plan.depths[d].table] {
            BucketWalk::List => self.list_level(d, key, &onward),
            BucketWalk::Mask { dups, window } => {
                self.mask_level(d, key, &onward, dups, window, next_y)
            }
        }
    }

    pub(super) fn is_head(&self, d: usize) -> bool {
        d.is_multiple_of(self.group)
    }

    /// The call that walks depth `d` onward from a function whose locals are `locals`.
    pub(super) fn call_next(&self, d: usize, locals: &[usize]) -> String {
        if d >= self.plan.len() {
            return String::new();
        }
        // a held free mask goes to `st.umask`, as the used one, before the call: the
        // callee reads it there
        let store = if self.held() {
            let u = d - 1;
            if self.mask_words() == 1 {
                format!("st.umask[0] = !u{u}; ")
            } else {
                format!("st.umask[0] = !(u{u} as u64); st.umask[1] = !((u{u} >> 64) as u64); ")
            }
        } else {
            String::new()
        };
        if self.is_head(d) {
            format!("{store}if g{d}(st) {{ return true; }}")
        } else {
            format!(
                "{{ {store}let start = {}; if scan(st, {d}, start) {{ return true; }} }}",
                self.bucket_expr(d, locals)
            )
        }
    }

    pub(super) fn groups(&mut self) {
        let depths = self.plan.len();
        // the group functions in MODULES modules (see there); they call each other by
        // name, through the crate root's imports
        let count = depths.div_ceil(self.group);
        let mut module = 0;
        w!(self, "mod p0 {{\nuse super::*;");
        let mut head = 0;
        while head < depths {
            if (head / self.group) * MODULES >= count * (module + 1) && module + 1 < MODULES {
                module += 1;
                w!(self, "}}\nmod p{module} {{\nuse super::*;");
            }
            let end = (head + self.group).min(depths);
            let levels: Vec<usize> = (head..end).collect();
            // build from the innermost level out
            let mut body = self.call_next(end, &levels);
            for &d in levels.iter().rev() {
                let locals: Vec<usize> = (head..d).collect();
                let key = self.key_index_expr(d, &locals);
                let next_y = self.chains.get(d + 1).copied().flatten();
                let next_y = next_y.map(|ch| {
                    let other = 1 - self.shapes[ch.shape].read;
                    self.key_expr(d + 1, other, &locals)
                });
                body = self.level(d, &key, &body, next_y.as_deref());
            }
            // a held free mask is read at entry and put back before a normal return (the
            // callees changed `st.umask` as they called on; a stop leaves it, the next
            // unit starts afresh)
            let (entry, exit) = if self.held() && self.mask_words() == 1 {
                ("let u_in: u64 = !st.umask[0];\n", "st.umask[0] = !u_in;\n")
            } else if self.held() {
                (
                    "let u_in: u128 = !((st.umask[0] as u128) | ((st.umask[1] as u128) << 64));\n",
                    "st.umask[0] = !(u_in as u64); st.umask[1] = !((u_in >> 64) as u64);\n",
                )
            } else {
                ("", "")
            };
            // a pruned level's copies are brought up to date before its loops run, at
            // its first head (the runtime's `scan` checks any head it enters): a node
            // placed at the depth above its cut since the last time, or a new unit
            let refresh = match self.pruned_level(head) {
                Some(k) if head % self.prune_every == 0 => format!(
                    "if unsafe {{ st.cells.get_unchecked(st.prune_at[{k}] as usize)[1] }} != st.seen[{k}] {{ e2fleet_rt::refilter(st, {k}); }}\n"
                ),
                _ => String::new(),
            };
            w!(
                self,
                "#[inline(never)]\npub fn g{head}(st: &mut St) -> bool {{\n{refresh}{entry}{body}{exit}false\n}}"
            );
            head = end;
        }
        w!(self, "}}");
        for m in 0..=module {
            w!(self, "use p{m}::*;");
        }
    }

    pub(super) fn scans(&mut self) {
        let depths = self.plan.len();
        let list: Vec<String> = (0..depths)
            .map(|d| {
                if self.is_head(d) {
                    format!("Some(g{d})")
                } else {
                    "None".into()
                }
            })
            .collect();
        w!(
            self,
            "static HEADS: [Option<fn(&mut St) -> bool>; {depths}] = [{}];",
            list.join(", ")
        );
    }
}
