//! A list level: every candidate of the bucket in canonical order, a used test each.
//! Every level of a board of more than 128 pieces (and of a table with three candidates
//! of one piece in a bucket) walks this way.
//!
//! A bucket's first candidate sits in `FIRST` at the key itself, so entering a cell is
//! one load after the key instead of two; a bucket's last candidate carries `LAST`, so the
//! walk ends on the candidate in hand; after a subtree the candidate is read back from the
//! board, not kept live. On boards of 129-256 pieces the candidate's low byte is its piece
//! ([`super::Layout`]), so the used test is one byte load. The depths are cut into pruned
//! levels ([`super::Prune`]) whose tables leave out the pieces placed above their cut.
//!
//! Names in the generated code, beside those of the group functions (`groups.rs`):
//!
//! | name | what it holds |
//! |---|---|
//! | `i{d}` | the index in `CANDS` (or `CANDS{k}`) of the candidate in hand |
//! | `FIRST{k}`, `CANDS{k}` | pruned level `k`'s copies of `FIRST` and `CANDS` |
//! | `st.prune_at[k]`, `st.seen[k]` | level `k`'s cut and the node count there when its copies were last brought up to date |
use super::Gen;

impl Gen<'_> {
    /// A level that walks its bucket's candidates in order, testing each piece's used byte.
    /// The first candidate comes from `FIRST` at the key, in parallel with the bucket's
    /// offset, so the walk into a cell waits for one load after the key, not two; the
    /// next one is read at the bottom of the loop (reading it ahead, before the used
    /// test, kept one more register live through the deeper levels: bench-hard +2%,
    /// bench-easy -12%). Whether the bucket goes on is the held candidate's [`LAST`] bit,
    /// not a test of the slot after it, so a mispredicted end resolves one load sooner;
    /// after a subtree the candidate (and its piece, to free) is read back from the board
    /// rather than kept live through the deeper levels (one spill per level fewer).
    pub(super) fn list_level(&self, d: usize, key: &str, onward: &str) -> String {
        let extra = self.extra_check(d, &format!("c{d}"));
        let commit = self.commit(d);
        let release = self.mark(d, false);
        let used = self.is_used(d);
        let pos = self.plan.depths[d].pos;
        let piece = self.layout.piece_expr(&format!("c{d}"));
        // a pruned level reads its own copies (the same starts: a bucket's kept
        // candidates are moved to its front)
        let (first, cand) = match self.pruned_level(d) {
            Some(k) => (
                format!("unsafe {{ *(&raw const FIRST{k}).cast::<u64>().add(k{d}) }}"),
                format!("unsafe {{ *(&raw const CANDS{k}).cast::<u64>().add(i{d}) }}"),
            ),
            None => (format!("FIRST[k{d}]"), format!("cand(i{d})")),
        };
        // `i{d}` never passes the bucket's last candidate
        format!(
            "let k{d}: usize = {key};\n\
             let mut c{d}: u64 = {first};\n\
             if c{d} != SENTINEL {{\n\
             let mut i{d}: usize = OFFS[k{d}] as usize;\n\
             loop {{\n\
             let p{d} = {piece};\n\
             if !({used}){extra} {{\n\
             {commit}\
             {onward}\n\
             c{d} = st.cells[{pos}][0];\n\
             let p{d} = {piece};\n\
             {release}\n\
             }}\n\
             if c{d} & LAST != 0 {{ break; }}\n\
             i{d} += 1; c{d} = {cand};\n\
             }}\n\
             }}\n"
        )
    }

    /// The pruned level depth `d` reads ([`Prune`]), if any.
    pub(super) fn pruned_level(&self, d: usize) -> Option<usize> {
        if self.prune_every == 0 {
            return None;
        }
        let k = d / self.prune_every;
        (self.prune_cut(k) >= 1).then_some(k)
    }

    /// Level `k`'s cut: the pieces placed above this depth are pruned from its tables.
    pub(super) fn prune_cut(&self, k: usize) -> usize {
        (k * self.prune_every).saturating_sub(self.prune_lag)
    }

    /// The pruned levels of the program.
    pub(super) fn pruned_levels(&self) -> Vec<usize> {
        let mut v: Vec<usize> = (0..self.plan.len())
            .filter_map(|d| self.pruned_level(d))
            .collect();
        v.dedup();
        v
    }
}
