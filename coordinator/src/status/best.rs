//! A job's best boards: the record table a long search is watched for. The deepest boards
//! of its accepted results (each verified when reported: every placement legal, every
//! placed neighbour matched), with their score in matched inner edges (the community's
//! measure: 480 is a finished 16x16) and who found them when.

use e2fleet_engine::model::Placement;
use e2fleet_proto::api::{AccountId, JobId};
use serde::Serialize;

use crate::fleet::policy::BEST_BOARDS;
use crate::fleet::{Fleet, FleetError};

/// One of a job's best boards.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BestBoard {
    /// 1 = deepest.
    pub rank: usize,
    /// Free cells filled.
    pub depth: usize,
    /// Matched inner edges (hints included).
    pub score: usize,
    /// Inner edges of the board.
    pub max_score: usize,
    /// Whose worker found it.
    pub account: AccountId,
    /// That worker's host label.
    pub hostname: String,
    /// When its result arrived, ms.
    pub found_ms: i64,
    /// Its placements in fill order (hints not included).
    pub board: Vec<Placement>,
}

/// Inner edges between two filled cells of a `width` x `height` board: in a board made by
/// placing only matching pieces, its matched edges.
pub fn score(width: usize, height: usize, filled: impl IntoIterator<Item = usize>) -> usize {
    let mut on = vec![false; width * height];
    for pos in filled {
        if pos < on.len() {
            on[pos] = true;
        }
    }
    let mut edges = 0;
    for y in 0..height {
        for x in 0..width {
            let p = y * width + x;
            if on[p] && x + 1 < width && on[p + 1] {
                edges += 1;
            }
            if on[p] && y + 1 < height && on[p + width] {
                edges += 1;
            }
        }
    }
    edges
}

impl Fleet {
    /// A job's best boards, deepest first (earliest found on ties).
    pub async fn best_boards(&self, job: JobId) -> Result<Vec<BestBoard>, FleetError> {
        let ctx = self.context(job).await?;
        let found = self
            .store
            .read(move |tx| tx.deepest_results_of_job(job, BEST_BOARDS))
            .await?;
        let puzzle = &ctx.spec.puzzle;
        let (w, h) = (puzzle.width(), puzzle.height());
        let max_score = 2 * w * h - w - h;
        let hints: Vec<usize> = puzzle.hints().iter().map(|p| p.pos as usize).collect();
        Ok(found
            .into_iter()
            .enumerate()
            .map(|(i, f)| {
                let cells = f.result.deepest.iter().map(|p| p.pos as usize);
                BestBoard {
                    rank: i + 1,
                    depth: f.result.max_depth,
                    score: score(w, h, hints.iter().copied().chain(cells)),
                    max_score,
                    account: f.account,
                    hostname: f.hostname,
                    found_ms: f.found_ms,
                    board: f.result.deepest,
                }
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::score;

    #[test]
    fn a_full_board_scores_its_inner_edges() {
        assert_eq!(score(16, 16, 0..256), 480);
        assert_eq!(score(6, 6, 0..36), 60);
        // a 4x4's first row and two cells of the second: 3 across, 1 across below, 2 down
        assert_eq!(score(4, 4, [0, 1, 2, 3, 4, 5]), 3 + 1 + 2);
        assert_eq!(score(4, 4, []), 0);
    }
}
