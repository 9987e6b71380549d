//! The node-local ranks ("clique") of a process, from the job's `PMI_process_mapping` value
//! (shared by `PMI_Get_clique_size`/`PMI_Get_clique_ranks` and `PMI2_Info_GetSize`).
//!
//! The value is MPICH's vector form `(vector,(start,nodes,ranks),…)`: each block puts
//! `ranks` consecutive ranks on each of the nodes `start..start+nodes`, blocks in order, and
//! the whole list starts over when ranks remain after its last block (MPICH's reading, spec
//! `docs/spec/pmi-wire.md` §8.1). Pure: no I/O, no panicking paths.

/// Most blocks read from one value (the process manager keeps the value under 600 bytes).
const MAX_BLOCKS: usize = 1024;
/// Largest job size mapped (libi's own limit on a job, `libi::job::MAX_JOB_SIZE`).
const MAX_SIZE: i32 = 1 << 24;

/// The blocks `(start, nodes, ranks)` of a `(vector,…)` value; `None` when malformed.
fn blocks(mapping: &str) -> Option<Vec<(u64, u64, u64)>> {
    let s: String = mapping.chars().filter(|c| !c.is_whitespace()).collect();
    let inner = s.strip_prefix("(vector")?.strip_suffix(')')?;
    let mut out = Vec::new();
    let mut rest = inner;
    while !rest.is_empty() {
        let r = rest.strip_prefix(",(")?;
        let end = r.find(')')?;
        let mut nums = r.get(..end)?.split(',').map(|n| n.parse::<u64>().ok());
        let (a, b, c) = (nums.next()??, nums.next()??, nums.next()??);
        if nums.next().is_some() || out.len() >= MAX_BLOCKS {
            return None;
        }
        out.push((a, b, c));
        rest = r.get(end + 1..)?;
    }
    Some(out)
}

/// The ranks that share `rank`'s node in a job of `size` ranks laid out by `mapping`, in
/// increasing order (`rank` included); `None` when the value is malformed, places no rank,
/// `rank` is not in `0..size` or `size` is over 2^24.
pub fn clique(mapping: &str, size: i32, rank: i32) -> Option<Vec<i32>> {
    let blocks = blocks(mapping)?;
    if rank < 0
        || rank >= size
        || size > MAX_SIZE
        || blocks.iter().all(|&(_, n, c)| n == 0 || c == 0)
    {
        return None;
    }
    // The node of each rank, in rank order (the list wraps until every rank has one).
    let mut node_of: Vec<u64> = Vec::with_capacity(usize::try_from(size).ok()?);
    'fill: loop {
        for &(start, nodes, ranks) in &blocks {
            for node in start..start.saturating_add(nodes) {
                for _ in 0..ranks {
                    if node_of.len() >= node_of.capacity() {
                        break 'fill;
                    }
                    node_of.push(node);
                }
            }
        }
    }
    let mine = *node_of.get(usize::try_from(rank).ok()?)?;
    let ranks = node_of.iter().enumerate().filter(|(_, &n)| n == mine);
    ranks.map(|(r, _)| i32::try_from(r).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::clique;

    #[test]
    fn blocks_wrap_and_merge() {
        // 2 nodes of 2: ranks 0,1 on node 0, 2,3 on node 1.
        assert_eq!(clique("(vector,(0,2,2))", 4, 3), Some(vec![2, 3]));
        assert_eq!(clique("(vector,(0,1,4))", 4, 1), Some(vec![0, 1, 2, 3]));
        // Round robin over 4 nodes (the list wraps): 0,4 on node 0; 1,5 on node 1.
        assert_eq!(clique("(vector,(0,4,1))", 6, 5), Some(vec![1, 5]));
        assert_eq!(clique("(vector,(0,1,1),(1,1,3))", 4, 2), Some(vec![1, 2, 3]));
        assert_eq!(clique(" (vector, (0,4,1)) ", 4, 0), Some(vec![0]));
    }

    #[test]
    fn malformed_values_and_ranks_are_refused() {
        for bad in ["", "(vector)", "(vector,(0,0,0))", "(vector,(0,1))", "(list,(0,1,1))", "x"] {
            assert_eq!(clique(bad, 2, 0), None, "{bad}");
        }
        assert_eq!(clique("(vector,(0,1,1),(1,1,1)", 2, 0), None);
        assert_eq!(clique("(vector,(0,1,2))", 2, 2), None);
        assert_eq!(clique("(vector,(0,1,2))", 2, -1), None);
        assert_eq!(clique("(vector,(0,1,2))", -3, 0), None);
    }
}
