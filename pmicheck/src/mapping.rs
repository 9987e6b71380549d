//! `PMI_process_mapping` (`docs/spec/pmi-wire.md` §8.1): `(vector,` block {`,` block} `)`
//! where a block is an explicit triplet `(start_node,n_nodes,ranks_per_node)`, a bare node id
//! `d` (= `(d,1,1)`) or a repeat `[ blocks ]xN` (the last two are MPICH ≥ 4.1's compressed
//! forms). Whitespace is ignored. Like MPICH, a mapping that covers fewer ranks than the job
//! wraps around.

/// The parsed mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// Node id of every rank `0..size`.
    pub nodes: Vec<u64>,
    /// Whether bare ids or `[..]xN` were used (MPICH 4.0.x cannot parse those).
    pub compressed: bool,
    /// Whether the blocks covered fewer ranks than the job (the wrap-around was used).
    pub wrapped: bool,
}

/// Upper bound on expanded blocks (a `[..]x1000000000` must not eat the memory).
const MAX_BLOCKS: usize = 1 << 20;

struct P<'a> {
    s: &'a [u8],
    i: usize,
    compressed: bool,
}

impl P<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }
    fn eat(&mut self, c: u8) -> Result<(), String> {
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            Err(format!("expected {:?} at offset {}", c as char, self.i))
        }
    }
    fn num(&mut self) -> Result<u64, String> {
        let st = self.i;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
        std::str::from_utf8(&self.s[st..self.i])
            .ok()
            .and_then(|d| d.parse().ok())
            .ok_or_else(|| format!("expected a number at offset {st}"))
    }
    /// blocks := block {`,` block}; stops before `)` or `]`.
    fn blocks(&mut self, out: &mut Vec<(u64, u64, u64)>) -> Result<(), String> {
        loop {
            match self.peek() {
                Some(b'(') => {
                    self.i += 1;
                    let a = self.num()?;
                    self.eat(b',')?;
                    let b = self.num()?;
                    self.eat(b',')?;
                    let c = self.num()?;
                    self.eat(b')')?;
                    out.push((a, b, c));
                }
                Some(b'[') => {
                    self.compressed = true;
                    self.i += 1;
                    let mut inner = Vec::new();
                    self.blocks(&mut inner)?;
                    self.eat(b']')?;
                    self.eat(b'x')?;
                    let n = self.num()?;
                    for _ in 0..n {
                        if out.len() + inner.len() > MAX_BLOCKS {
                            return Err("too many blocks".into());
                        }
                        out.extend_from_slice(&inner);
                    }
                }
                Some(c) if c.is_ascii_digit() => {
                    self.compressed = true;
                    let d = self.num()?;
                    out.push((d, 1, 1));
                }
                _ => return Err(format!("expected a block at offset {}", self.i)),
            }
            if out.len() > MAX_BLOCKS {
                return Err("too many blocks".into());
            }
            if self.peek() == Some(b',') {
                self.i += 1;
            } else {
                return Ok(());
            }
        }
    }
}

/// Parse `s` for a job of `size` ranks.
pub fn parse(s: &str, size: usize) -> Result<Mapping, String> {
    let compact: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    let body = compact
        .strip_prefix(b"(vector,")
        .and_then(|b| b.strip_suffix(b")"))
        .ok_or("not of the form (vector,...)")?;
    let mut p = P { s: body, i: 0, compressed: false };
    let mut blocks = Vec::new();
    p.blocks(&mut blocks)?;
    if p.i != body.len() {
        return Err(format!("trailing characters at offset {}", p.i + 8));
    }
    let mut nodes = Vec::with_capacity(size);
    let mut wrapped = false;
    'outer: loop {
        let before = nodes.len();
        for &(start, n, ppn) in &blocks {
            for node in start..start.saturating_add(n) {
                for _ in 0..ppn {
                    if nodes.len() == size {
                        break 'outer;
                    }
                    nodes.push(node);
                }
            }
        }
        if nodes.len() == size {
            break;
        }
        if nodes.len() == before {
            return Err("the blocks hold no ranks".into());
        }
        wrapped = true;
    }
    Ok(Mapping { nodes, compressed: p.compressed, wrapped })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triplets() {
        let m = parse("(vector,(0,2,2))", 4).unwrap();
        assert_eq!(m.nodes, vec![0, 0, 1, 1]);
        assert!(!m.compressed && !m.wrapped);
        let m = parse("(vector,(0,2,2),(2,2,4))", 12).unwrap();
        assert_eq!(m.nodes, vec![0, 0, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3]);
        let m = parse(" (vector, (1,3,1) ) ", 3).unwrap();
        assert_eq!(m.nodes, vec![1, 2, 3]);
    }

    #[test]
    fn cyclic_and_wrap() {
        assert_eq!(parse("(vector,(0,2,1),(0,2,1))", 4).unwrap().nodes, vec![0, 1, 0, 1]);
        let m = parse("(vector,(0,1,1))", 3).unwrap();
        assert_eq!(m.nodes, vec![0, 0, 0]);
        assert!(m.wrapped);
    }

    #[test]
    fn compressed_forms() {
        let m = parse("(vector,[0,1]x2)", 4).unwrap();
        assert_eq!(m.nodes, vec![0, 1, 0, 1]);
        assert!(m.compressed);
        let m = parse("(vector,0,1,[(2,1,2)]x2)", 6).unwrap();
        assert_eq!(m.nodes, vec![0, 1, 2, 2, 2, 2]);
        let m = parse("(vector,[[0]x2,1]x2)", 6).unwrap();
        assert_eq!(m.nodes, vec![0, 0, 1, 0, 0, 1]);
    }

    #[test]
    fn errors() {
        for bad in [
            "",
            "(vector,)",
            "(vector,(0,1))",
            "vector,(0,1,1)",
            "(vector,(0,0,1))",
            "(vector,(a,1,1))",
        ] {
            assert!(parse(bad, 2).is_err(), "{bad}");
        }
        assert!(parse("(vector,[0]x99999999999)", 2).is_err());
    }
}
