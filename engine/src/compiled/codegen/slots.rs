//! The slot walk (boards of more than 128 pieces, scan orders: [`super::slot_walk_applies`]):
//! one function per bucket with a used-test branch and a call site of its own for every
//! candidate, the next bucket's function found by key. The predictor then sees each
//! slot's piece, whose free/used state lasts, instead of one branch shared by a depth's
//! every candidate. Its functions reach the program's state, a static, at fixed addresses
//! (engines link position-dependent on Linux x86-64).
//!
//! Names in the generated code:
//!
//! | name | what it is |
//! |---|---|
//! | `b{start}(d, slot)` | the function of the bucket starting at `start` in `CANDS`: counts the caller's placement (`slot` at depth `d - 1`), then tries each candidate |
//! | `bempty`, `bsol`, `bnone` | an empty bucket (count only), the depth after the last (count and record the solution), what every key leads to while a stopped unit returns |
//! | `enter`, `halt`, `fill` | count a placement; stop (every key to `bnone`); point every key back at its function |
//! | `BFT`, `BFI`, `FNS` | key -> function address (filled at start), key -> index into `FNS`, the distinct functions |
//! | `bf(k)` | the function of key `k` |
//! | `NX`, `ME`, `POS` | per depth: the next key's base and the bytes of its two colours, which of them the previous depth placed, the depth's cell |
//! | `nx`, `kb` | in a bucket function: the next depth's `NX` entry and its key base |
//! | `head(d)`, `h{d}` | the entry from the runtime's cold scan at depth `d` |
use std::fmt::Write;

use crate::plan::SENTINEL;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::{Gen, MODULES};

impl Gen<'_> {
    /// The slot walk: every bucket a function `b{start}(d, slot)` that first counts
    /// the caller's placement (candidate `slot` at depth `d - 1`: board, node count, first
    /// visit, solution, budget) and then tries each of its candidates in canonical order
    /// with its own used-test branch (the piece id a constant) and its own call site into
    /// the next depth's bucket, found by key in `BF`. A piece's free/used state lasts, so
    /// a branch per slot is far more predictable than one per depth (42% -> 7%
    /// mispredicted in a 2-bit model). An empty bucket is `bempty` (count only), the
    /// depth after the last `bsol` (count and record the solution). A bucket reached from
    /// one depth only gets its cells as constants; the next key's colour from the placed
    /// cell is a constant per slot added to a base the bucket computes once, and a key
    /// whose high colour is the placed cell's (a cell keyed by one side) is read through a
    /// transposed copy of its table so that colour is always the low one. The functions
    /// return nothing: a unit that stops points every key at a no-op (`halt`), and the
    /// walk returns to the runtime trying its remaining candidates without counting (no
    /// call site tests a result: 38.6 -> 33.5 instructions per node on the real E2's
    /// pieces without a clue).
    pub(super) fn slot_walk(&mut self) {
        let plan = self.slot_plan();
        self.slot_statics(&plan);
        let module_of = self.bucket_functions(&plan);
        self.slot_function_table(&plan.targets, &module_of);
        self.slot_heads();
    }

    /// The slot walk's shape, before any of it is written: which depths reach each
    /// bucket, the key -> function table, each depth's next key.
    fn slot_plan(&self) -> SlotPlan {
        let p = self.plan;
        let offs = self.offsets();
        let depths = p.len();
        let log = self.stride_log2() as usize;
        let side = 1usize << log;
        let layout = self.layout;
        let byte = |cell: usize, shift: u32| cell * 16 + layout.at(shift) as usize / 8;
        // which depths each bucket (by its first slot) is walked at
        let mut reach: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
        for (d, dp) in p.depths.iter().enumerate() {
            let base = self.table_offset(dp.table);
            for &o in &offs[base..base + side * side] {
                if p.candidates[o as usize] != SENTINEL {
                    reach.entry(o as usize).or_default().insert(d);
                }
            }
        }
        // key -> function; then the solution keys; then transposed tables
        let mut targets: Vec<String> = offs
            .iter()
            .map(|&o| match reach.contains_key(&(o as usize)) {
                true => format!("b{o}"),
                false => "bempty".into(),
            })
            .collect();
        let sol = targets.len();
        targets.extend(std::iter::repeat_n("bsol".to_string(), 256));
        // per depth: (key base, byte of the high colour, byte of the low colour, which of
        // them is the previous depth's cell: 1 high, 2 low)
        let mut keys: Vec<(usize, usize, usize, u8)> = Vec::with_capacity(depths + 1);
        let mut transposed: HashMap<usize, usize> = HashMap::new();
        for (d, dp) in p.depths.iter().enumerate() {
            let (base, [hi, lo]) = (self.table_offset(dp.table), dp.key);
            let prev = d.checked_sub(1).map(|e| p.depths[e].pos);
            let me = |cell: usize| Some(cell) == prev;
            if me(hi.cell) && !me(lo.cell) {
                let t = *transposed.entry(base).or_insert_with(|| {
                    let t = targets.len();
                    for b in 0..side {
                        for a in 0..side {
                            let f = targets[base + (a << log) + b].clone();
                            targets.push(f);
                        }
                    }
                    t
                });
                keys.push((t, byte(lo.cell, lo.shift), byte(hi.cell, hi.shift), 2));
            } else {
                let m = me(hi.cell) as u8 | (me(lo.cell) as u8) << 1;
                keys.push((base, byte(hi.cell, hi.shift), byte(lo.cell, lo.shift), m));
            }
        }
        keys.push((sol, byte(p.cells, 0), byte(p.cells, 0), 0));
        // the shift of the placed candidate's colour a next key reads: one for the whole
        // order (`slot_walk_applies`)
        let shift = p
            .depths
            .windows(2)
            .find_map(|w| w[1].key.iter().find(|k| k.cell == w[0].pos))
            .map_or(0, |k| k.shift);
        SlotPlan {
            reach,
            targets,
            keys,
            shift,
        }
    }

    /// The per-depth tables (`NX`, `ME`, `POS`) and the helpers every bucket function
    /// calls.
    fn slot_statics(&mut self, plan: &SlotPlan) {
        let (p, keys) = (self.plan, &plan.keys);
        let depths = p.len();
        w!(self, "type Bf = fn(usize, usize);");
        w!(self, "const DEPTHS: usize = {depths};");
        let nx: Vec<String> = keys
            .iter()
            .map(|k| format!("({}, {}, {})", k.0, k.1, k.2))
            .collect();
        self.array("NX", "(u32, u16, u16)", nx.into_iter());
        let me: Vec<String> = keys.iter().map(|k| k.3.to_string()).collect();
        self.array("ME", "u8", me.into_iter());
        self.words("POS", "u16", p.depths.iter().map(|d| d.pos as u64));
        w!(
            self,
            r#"#[inline(always)]
fn colour(st: &St, off: usize) -> usize {{ unsafe {{ *(st.cells.as_ptr() as *const u8).add(off) as usize }} }}
#[inline(always)]
fn bf(k: usize) -> Bf {{ unsafe {{ core::mem::transmute::<usize, Bf>(*(&raw const BFT).cast::<usize>().add(k)) }} }}
/// Counts candidate `slot` placed at depth `d - 1`; true if the unit stops there.
#[inline(always)]
fn enter(st: &mut St, d: usize, slot: usize, last: bool) -> bool {{
    let c = cand(slot);
    // `POS` holds cells of the board (its values are not visible from the modules)
    let pos = unsafe {{ *POS.get_unchecked(d - 1) }} as usize;
    let wrapped = {{
        let cell = unsafe {{ st.cells.get_unchecked_mut(pos) }};
        cell[0] = c;
        cell[1] = cell[1].wrapping_add(1);
        cell[1] == 0
    }};
    if wrapped {{ st.first_visit(d - 1); }}
    if last {{ st.solution(); }}
    st.left -= 1;
    st.left == 0 && st.slow(d - 1)
}}
#[inline(never)]
fn bempty(d: usize, slot: usize) {{ if enter(state(), d, slot, false) {{ halt(); }} }}
#[inline(never)]
fn bsol(d: usize, slot: usize) {{ if enter(state(), d, slot, true) {{ halt(); }} }}
/// What every key leads to while a stopped unit returns: nothing is counted.
fn bnone(_: usize, _: usize) {{}}
static mut HALTED: bool = false;
/// The unit stops: every key leads to `bnone`, so the functions on the way back up try
/// their remaining candidates without counting or going deeper. No call site tests a
/// return value.
#[cold]
#[inline(never)]
fn halt() {{ unsafe {{ HALTED = true; let t = &raw mut BFT; for e in (*t).iter_mut() {{ *e = bnone as usize; }} }} }}
/// Points every key at its bucket function (at start, and after a stop).
#[inline(never)]
fn fill() {{ unsafe {{ let t = &raw mut BFT; for (i, &f) in BFI.iter().enumerate() {{ (*t)[i] = FNS[f as usize] as usize; }} }} }}"#
        );
    }

    /// The bucket functions, in [`MODULES`] modules of about equal size (they call each
    /// other only through `BFT`); the module each is in, by name.
    fn bucket_functions(&mut self, plan: &SlotPlan) -> HashMap<String, usize> {
        let (p, reach) = (self.plan, &plan.reach);
        let sizes: Vec<usize> = reach
            .keys()
            .map(|&start| {
                p.candidates[start..]
                    .iter()
                    .take_while(|&&c| c != SENTINEL)
                    .count()
                    + 2
            })
            .collect();
        let total: usize = sizes.iter().sum();
        let mut module_of: HashMap<String, usize> = HashMap::new();
        let (mut module, mut done) = (0, 0);
        w!(self, "mod p0 {{\nuse super::*;");
        for ((&start, ds), size) in reach.iter().zip(&sizes) {
            if done * MODULES >= total * (module + 1) && module + 1 < MODULES {
                module += 1;
                w!(self, "}}\nmod p{module} {{\nuse super::*;");
            }
            done += size;
            module_of.insert(format!("b{start}"), module);
            self.bucket_function(start, ds, plan);
        }
        w!(self, "}}");
        module_of
    }

    /// The function of the bucket starting at `start` in `CANDS`, walked at depths `ds`.
    fn bucket_function(&mut self, start: usize, ds: &BTreeSet<usize>, plan: &SlotPlan) {
        let (p, keys, shift) = (self.plan, &plan.keys, plan.shift);
        let log = self.stride_log2() as usize;
        let side = 1usize << log;
        w!(
            self,
            "#[inline(never)]\npub fn b{start}(d: usize, slot: usize) {{\nlet st = state();\nif enter(st, d, slot, false) {{ halt(); return; }}"
        );
        if ds.len() == 1 {
            let d = *ds.iter().next().unwrap();
            w!(self, "let d: usize = {d};");
        }
        let pats: BTreeSet<u8> = ds.iter().map(|&d| keys[d + 1].3).collect();
        let uniform = pats.len() == 1;
        let pat = *pats.iter().next().unwrap();
        if uniform {
            let hi = if pat & 1 != 0 {
                String::new()
            } else {
                format!(" + (colour(st, nx.1 as usize) << {log})")
            };
            let lo = if pat & 2 != 0 {
                ""
            } else {
                " + colour(st, nx.2 as usize)"
            };
            w!(
                self,
                "let nx = unsafe {{ *NX.get_unchecked(d + 1) }}; let kb = nx.0 as usize{hi}{lo};"
            );
        } else {
            // depths that disagree on which key part is the placed colour: it is scaled per
            // depth (a rare shape)
            w!(
                self,
                "let nx = unsafe {{ *NX.get_unchecked(d + 1) }}; let me = unsafe {{ *ME.get_unchecked(d + 1) }}; let mul = [0usize, {}, 1, {}][me as usize & 3]; let kb = nx.0 as usize + (if me & 1 != 0 {{ 0 }} else {{ colour(st, nx.1 as usize) << {log} }}) + (if me & 2 != 0 {{ 0 }} else {{ colour(st, nx.2 as usize) }});",
                side,
                side + 1
            );
        }
        let mut i = start;
        while p.candidates[i] != SENTINEL {
            let c = p.candidates[i];
            let piece = crate::plan::candidate_piece(c);
            let r = ((c >> shift) & 0xFF) as usize;
            let key = match (uniform, pat) {
                (false, _) => format!("kb + {r} * mul"),
                (true, 1) => format!("kb + {}", r << log),
                (true, 2) => format!("kb + {r}"),
                (true, 3) => format!("kb + {}", (r << log) + r),
                (true, _) => "kb".to_string(),
            };
            w!(
                self,
                "if st.used[{piece}] == 0 {{\nst.used[{piece}] = 1;\nbf({key})(d + 1, {i});\nst.used[{piece}] = 0;\n}}"
            );
            i += 1;
        }
        w!(self, "}}");
    }

    /// Key -> function, as an index into the distinct functions: rustc type-checks an
    /// array of ~10^5 function items for seconds, an array of integers in no time. `main`
    /// fills `BFT` (the addresses, read by `bf`) before serving.
    fn slot_function_table(&mut self, targets: &[String], module_of: &HashMap<String, usize>) {
        let mut names: Vec<String> = targets.to_vec();
        names.sort();
        names.dedup();
        let index: HashMap<&str, usize> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_str(), i))
            .collect();
        let idx: Vec<u64> = targets.iter().map(|t| index[t.as_str()] as u64).collect();
        self.array(
            "FNS",
            "Bf",
            names.iter().map(|n| match module_of.get(n) {
                Some(m) => format!("p{m}::{n}"),
                None => n.clone(),
            }),
        );
        self.words("BFI", "u16", idx.into_iter());
        w!(
            self,
            "static mut BFT: [usize; {n}] = [0; {n}];",
            n = targets.len()
        );
        self.main_init = "fill();".into();
    }

    /// Entries from the runtime's cold scan, which has counted the placement at d - 1
    /// already: that count is taken back and the bucket function counts it again. One
    /// function for every depth, behind a thunk per depth (the runtime's table takes no
    /// depth); it tells the runtime whether the unit stopped below it, and if so points
    /// the table back at the bucket functions.
    fn slot_heads(&mut self) {
        let depths = self.plan.len();
        let log = self.stride_log2() as usize;
        w!(
            self,
            "#[inline(never)]\nfn head(d: usize) -> bool {{ let st = state(); let pos = POS[d - 1] as usize; st.cells[pos][1] = st.cells[pos][1].wrapping_sub(1); st.left += 1; let c = st.cells[pos][0]; let slot = CANDS.iter().position(|&x| x == c).unwrap(); let nx = NX[d]; let k = nx.0 as usize + (colour(st, nx.1 as usize) << {log}) + colour(st, nx.2 as usize); bf(k)(d, slot); if unsafe {{ HALTED }} {{ unsafe {{ HALTED = false; }} fill(); true }} else {{ false }} }}"
        );
        for d in 1..depths {
            w!(self, "fn h{d}(_: &mut St) -> bool {{ head({d}) }}");
        }
        let heads: Vec<String> = (0..depths)
            .map(|d| match d {
                0 => "None".to_string(),
                _ => format!("Some(h{d})"),
            })
            .collect();
        w!(
            self,
            "static HEADS: [Option<fn(&mut St) -> bool>; {depths}] = [{}];",
            heads.join(", ")
        );
    }
}

/// What the slot walk's tables say ([`Gen::slot_plan`]).
struct SlotPlan {
    /// Which depths each bucket (by its first slot) is walked at.
    reach: BTreeMap<usize, BTreeSet<usize>>,
    /// Key -> function name; then the solution keys; then transposed tables.
    targets: Vec<String>,
    /// Per depth: (key base, byte of the high colour, byte of the low colour, which of
    /// them is the previous depth's cell: 1 high, 2 low).
    keys: Vec<(usize, usize, usize, u8)>,
    /// The shift of the placed candidate's colour a next key reads.
    shift: u32,
}
