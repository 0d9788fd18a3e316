//! Infers a dense shape from nested JSON lists while they stream past, rejecting
//! ragged nesting without building an intermediate tree.

use super::CodecError;

/// Tracks, per nesting depth, the list length seen first, and the depth at which
/// scalars appear (the rank).
#[derive(Debug, Default)]
pub struct ShapeTracker {
    dims: Vec<Option<usize>>,
    rank: Option<usize>,
}

impl ShapeTracker {
    /// Called when a list opens at `depth`.
    pub fn enter_list(&mut self, depth: usize) -> Result<(), CodecError> {
        match self.rank {
            Some(rank) if depth >= rank => Err(CodecError::ListPastRank { depth, rank }),
            _ => Ok(()),
        }
    }

    /// Called when a list of `len` elements closes at `depth`.
    pub fn close_list(&mut self, depth: usize, len: usize) -> Result<(), CodecError> {
        if self.dims.len() <= depth {
            self.dims.resize(depth + 1, None);
        }
        match self.dims[depth] {
            None => {
                self.dims[depth] = Some(len);
                Ok(())
            }
            Some(expected) if expected == len => Ok(()),
            Some(expected) => Err(CodecError::Ragged { depth, len, expected }),
        }
    }

    /// Called for every scalar, found at `depth`.
    pub fn scalar(&mut self, depth: usize) -> Result<(), CodecError> {
        match self.rank {
            None => {
                if self.dims.len() > depth && self.dims[depth].is_some() {
                    return Err(CodecError::ScalarAmongLists(depth));
                }
                self.rank = Some(depth);
                Ok(())
            }
            Some(rank) if rank == depth => Ok(()),
            Some(rank) => Err(CodecError::ScalarDepth { depth, rank }),
        }
    }

    /// The inferred shape. Lists that held no scalars anywhere (e.g. `[[], []]`)
    /// contribute the dimensions that were seen.
    pub fn finish(self) -> Vec<usize> {
        let rank = self
            .rank
            .unwrap_or_else(|| self.dims.iter().take_while(|d| d.is_some()).count());
        (0..rank)
            .map(|d| self.dims.get(d).copied().flatten().unwrap_or(0))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn walk(value: &serde_json::Value, depth: usize, t: &mut ShapeTracker) -> Result<(), CodecError> {
        match value {
            serde_json::Value::Array(items) => {
                t.enter_list(depth)?;
                for item in items {
                    walk(item, depth + 1, t)?;
                }
                t.close_list(depth, items.len())
            }
            _ => t.scalar(depth),
        }
    }

    fn shape_of(json: &str) -> Result<Vec<usize>, String> {
        let value: serde_json::Value = serde_json::from_str(json).unwrap();
        let mut t = ShapeTracker::default();
        walk(&value, 0, &mut t).map_err(|e| e.to_string())?;
        Ok(t.finish())
    }

    #[test]
    fn infers_dense_shapes() {
        assert_eq!(shape_of("1").unwrap(), Vec::<usize>::new());
        assert_eq!(shape_of("[1,2,3]").unwrap(), vec![3]);
        assert_eq!(shape_of("[[1,2],[3,4],[5,6]]").unwrap(), vec![3, 2]);
        assert_eq!(shape_of("[]").unwrap(), vec![0]);
        assert_eq!(shape_of("[[],[]]").unwrap(), vec![2, 0]);
    }

    #[test]
    fn rejects_ragged_and_mixed_nesting() {
        assert!(shape_of("[[1,2],[3]]").unwrap_err().contains("ragged"));
        assert!(shape_of("[[1,2],3]").is_err());
        assert!(shape_of("[1,[2]]").is_err());
        assert!(shape_of("[[],[1]]").is_err());
    }
}
