//! PMIx over the tree: what a node does with its PMIx companion's requests
//! (`docs/spec/pmix-companion.md` §6), as state of the node core.
//!
//! A node whose job serves PMIx ([`libi::job::JobCommon::pmix`]) and that runs ranks has a
//! companion (`libi-pmix`, an OpenPMIx server); its requests come in as
//! [`FromCompanion`](libi_pmix::proto::FromCompanion) messages and the answers go out as [`Effect::ToPmix`]. This module
//! holds the two things that are more than a one-line answer:
//!
//! * **fences** ([`PmixFences`]): libpmix asks its host once per fence, when every local
//!   participant entered, with this server's contribution (one packed blob). The job's
//!   fence result, which every server unpacks, is the concatenation of every server's blob
//!   in any order. So a node waits for its own server (if it runs ranks) and for each child
//!   subtree, sends the concatenation up ([`Msg::PmixFenceIn`]); the node whose subtree
//!   holds the whole job releases it ([`Msg::PmixFenceOut`]) and each node answers its
//!   server with the whole concatenation. Fences are numbered alike on every node (the
//!   `seq`-th fence of the job), one at a time: libpmix holds the next fence of the same
//!   participants until the previous one completed, and the fences of an MPI job are over
//!   all of its ranks.
//! * **name-service requests of several keys** ([`NameBatch`]): a `PMIx_Publish` of `n`
//!   pairs becomes `n` requests of the job's name service (which holds one service name per
//!   request); the companion gets one answer once all came back.

use crate::proto::node::Effect;
use libi::msg::Msg;
use libi_pmix::proto::{status, Published, Status, ToCompanion};

/// PMIx's wildcard rank (every rank of a namespace).
pub const WILDCARD: u32 = libi_pmix::proto::RANK_WILDCARD;

/// The fences of one node: its server's contribution and each child subtree's.
#[derive(Debug)]
pub struct PmixFences {
    /// The job's fence in progress (every node counts from 0).
    seq: u64,
    /// This node runs ranks, so its server takes part in every fence.
    has_server: bool,
    /// The node's subtree holds the whole job: it releases the fences.
    releases: bool,
    /// The server's request (its id) once it entered the current fence.
    entered: Option<u64>,
    /// Which children's subtrees entered the current fence.
    child_in: Vec<bool>,
    /// The concatenation of the blobs of this fence so far (the server's and the
    /// children's, in the order they came).
    blob: Vec<u8>,
}

impl PmixFences {
    /// `children`: how many child subtrees take part (each one's NLAs run ranks).
    pub fn new(has_server: bool, children: usize, releases: bool) -> Self {
        PmixFences {
            seq: 0,
            has_server,
            releases,
            entered: None,
            child_in: vec![false; children],
            blob: Vec::new(),
        }
    }

    /// The fence in progress (for messages and tests).
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// This node's server entered the fence (request `id`) with `blob`.
    pub fn server_entered(&mut self, id: u64, blob: &[u8], fx: &mut Vec<Effect>) {
        if self.entered.is_some() || !self.has_server {
            // libpmix asks once per fence and waits for the answer: a second request is a
            // fence we cannot tell apart from the first (another participant set).
            fx.push(answer(id, status::ERR_NOT_SUPPORTED, Vec::new()));
            fx.push(Effect::Warn(format!(
                "a second PMIx fence (request {id}) while fence {} is in progress: fences \
                 over part of a job are not supported",
                self.seq
            )));
            return;
        }
        self.entered = Some(id);
        self.blob.extend_from_slice(blob);
        self.maybe_done(fx);
    }

    /// Child `idx`'s subtree entered fence `seq` with `blob`.
    pub fn child_entered(&mut self, idx: usize, seq: u64, blob: &[u8], fx: &mut Vec<Effect>) {
        if seq != self.seq || self.child_in.get(idx).copied() != Some(false) {
            fx.push(Effect::Warn(format!(
                "PMIx fence {seq} from child {idx} during fence {}",
                self.seq
            )));
            return;
        }
        self.child_in[idx] = true;
        self.blob.extend_from_slice(blob);
        self.maybe_done(fx);
    }

    /// The parent released fence `seq` with the job's whole blob.
    pub fn released(&mut self, seq: u64, blob: Vec<u8>, fx: &mut Vec<Effect>) {
        if seq != self.seq {
            fx.push(Effect::Warn(format!("PMIx fence release {seq} during fence {}", self.seq)));
            return;
        }
        self.finish(blob, fx);
    }

    fn maybe_done(&mut self, fx: &mut Vec<Effect>) {
        if (self.has_server && self.entered.is_none()) || self.child_in.contains(&false) {
            return;
        }
        let blob = std::mem::take(&mut self.blob);
        if self.releases {
            self.finish(blob, fx);
        } else {
            fx.push(Effect::ToParent(Msg::PmixFenceIn { seq: self.seq, blob }));
        }
    }

    /// Fence `seq` is complete: the children and the server get the whole blob.
    fn finish(&mut self, blob: Vec<u8>, fx: &mut Vec<Effect>) {
        let seq = self.seq;
        self.seq += 1;
        self.child_in.iter_mut().for_each(|c| *c = false);
        self.blob.clear();
        let id = self.entered.take();
        let children = !self.child_in.is_empty();
        match id {
            Some(id) if children => {
                fx.push(Effect::ToChildren(Msg::PmixFenceOut { seq, blob: blob.clone() }));
                fx.push(answer(id, status::SUCCESS, blob));
            }
            Some(id) => fx.push(answer(id, status::SUCCESS, blob)),
            None if children => fx.push(Effect::ToChildren(Msg::PmixFenceOut { seq, blob })),
            None => {}
        }
    }
}

fn answer(id: u64, status: Status, blob: Vec<u8>) -> Effect {
    Effect::ToPmix(ToCompanion::FenceDone { id, status, blob })
}

/// What a server registers of another group's namespace after a connect: its size,
/// applications and node map, no ranks here ([`libi_pmix::proto::REMOTE_NODE`]).
pub fn remote_nspace(j: &libi::job::PmixPeer) -> libi_pmix::proto::NspaceInfo {
    use libi_pmix::proto::{AppInfo, NodeInfo, NspaceInfo, Proc, REMOTE_NODE};
    NspaceInfo {
        nspace: j.nspace.clone(),
        size: j.size,
        universe: j.size,
        apps: j.apps.iter().map(|&size| AppInfo { size, wdir: None }).collect(),
        nodes: (j.map.nodes.iter())
            .map(|(host, ranks)| NodeInfo { host: host.clone(), ranks: ranks.clone() })
            .collect(),
        this_node: REMOTE_NODE,
        local: Vec::new(),
        tmpdir: String::new(),
        parent: j
            .map
            .parent
            .as_ref()
            .map(|(nspace, rank)| Proc { nspace: nspace.clone(), rank: *rank }),
        oversubscribed: false,
    }
}

/// What a name-service request of the companion is, and what came back so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameKind {
    Publish,
    Unpublish,
    Lookup,
    /// A lookup that waits until the names are published (`PMIX_WAIT`).
    LookupWait,
}

/// One companion request made of several name-service requests (one per key).
#[derive(Debug, Clone)]
pub struct NameBatch {
    pub kind: NameKind,
    /// Answers still to come.
    pub left: usize,
    /// Every answer so far said yes.
    pub ok: bool,
    /// Lookups: what was found.
    pub found: Vec<(String, String)>,
}

impl NameBatch {
    pub fn new(kind: NameKind, requests: usize) -> Self {
        NameBatch { kind, left: requests, ok: true, found: Vec::new() }
    }

    /// One answer for `key`; `Some(answer)` for the companion once it was the last.
    pub fn answered(
        &mut self,
        id: u64,
        key: &str,
        ok: bool,
        value: Option<String>,
        publisher: &libi_pmix::proto::Proc,
    ) -> Option<ToCompanion> {
        self.left = self.left.saturating_sub(1);
        self.ok &= ok;
        if let Some(v) = value {
            self.found.push((key.to_string(), v));
        }
        if self.left > 0 {
            return None;
        }
        Some(match self.kind {
            NameKind::Lookup | NameKind::LookupWait => {
                let found: Vec<Published> = std::mem::take(&mut self.found)
                    .into_iter()
                    .map(|(key, value)| Published { key, value, publisher: publisher.clone() })
                    .collect();
                let status = if found.is_empty() { status::ERR_NOT_FOUND } else { status::SUCCESS };
                ToCompanion::LookupResult { id, status, found }
            }
            NameKind::Publish | NameKind::Unpublish => {
                let status = if self.ok { status::SUCCESS } else { status::ERROR };
                ToCompanion::Done { id, status }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(fx: &[Effect]) -> Vec<(u64, Vec<u8>)> {
        fx.iter()
            .filter_map(|e| match e {
                Effect::ToPmix(ToCompanion::FenceDone { id, status: 0, blob }) => {
                    Some((*id, blob.clone()))
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_lone_node_answers_its_server_with_its_own_blob() {
        let mut f = PmixFences::new(true, 0, true);
        let mut fx = Vec::new();
        f.server_entered(7, b"abc", &mut fx);
        assert_eq!(done(&fx), vec![(7, b"abc".to_vec())]);
        assert_eq!(f.seq(), 1);
    }

    #[test]
    fn a_node_sends_up_once_its_server_and_every_child_entered() {
        let mut f = PmixFences::new(true, 2, false);
        let mut fx = Vec::new();
        f.child_entered(1, 0, b"C1", &mut fx);
        f.server_entered(3, b"S", &mut fx);
        assert!(fx.is_empty(), "child 0 has not entered: {fx:?}");
        f.child_entered(0, 0, b"C0", &mut fx);
        assert_eq!(fx.len(), 1);
        match &fx[0] {
            Effect::ToParent(Msg::PmixFenceIn { seq: 0, blob }) => {
                assert_eq!(blob, b"C1SC0");
            }
            other => panic!("{other:?}"),
        }
        fx.clear();
        f.released(0, b"ALL".to_vec(), &mut fx);
        assert!(
            matches!(&fx[0], Effect::ToChildren(Msg::PmixFenceOut { seq: 0, blob }) if blob == b"ALL")
        );
        assert_eq!(done(&fx), vec![(3, b"ALL".to_vec())]);
        // The next fence starts empty.
        fx.clear();
        f.server_entered(4, b"", &mut fx);
        f.child_entered(0, 1, b"", &mut fx);
        f.child_entered(1, 1, b"", &mut fx);
        assert!(
            matches!(&fx[0], Effect::ToParent(Msg::PmixFenceIn { seq: 1, blob }) if blob.is_empty())
        );
    }

    #[test]
    fn the_root_without_ranks_releases_what_its_children_sent() {
        let mut f = PmixFences::new(false, 2, true);
        let mut fx = Vec::new();
        f.child_entered(0, 0, b"A", &mut fx);
        f.child_entered(1, 0, b"B", &mut fx);
        assert_eq!(fx.len(), 1);
        assert!(
            matches!(&fx[0], Effect::ToChildren(Msg::PmixFenceOut { seq: 0, blob }) if blob == b"AB")
        );
    }

    #[test]
    fn a_second_fence_of_the_server_and_a_stray_child_fence_are_refused() {
        let mut f = PmixFences::new(true, 1, false);
        let mut fx = Vec::new();
        f.server_entered(1, b"x", &mut fx);
        f.server_entered(2, b"y", &mut fx);
        assert!(fx.iter().any(|e| matches!(
            e,
            Effect::ToPmix(ToCompanion::FenceDone { id: 2, status: status::ERR_NOT_SUPPORTED, .. })
        )));
        fx.clear();
        f.child_entered(0, 5, b"z", &mut fx);
        assert!(matches!(&fx[0], Effect::Warn(_)));
        f.child_entered(0, 0, b"z", &mut fx);
        assert!(
            matches!(&fx[1], Effect::ToParent(Msg::PmixFenceIn { seq: 0, blob }) if blob == b"xz")
        );
    }

    #[test]
    fn a_lookup_of_two_keys_answers_once_with_what_was_found() {
        let me = libi_pmix::proto::Proc { nspace: "kvs_1".into(), rank: 0 };
        let mut b = NameBatch::new(NameKind::Lookup, 2);
        assert!(b.answered(9, "a", true, Some("port-a".into()), &me).is_none());
        let last = b.answered(9, "b", false, None, &me);
        match last {
            Some(ToCompanion::LookupResult { id: 9, status: 0, found }) => {
                assert_eq!(found.len(), 1);
                assert_eq!(found[0].key, "a");
                assert_eq!(found[0].value, "port-a");
            }
            other => panic!("{other:?}"),
        }
        let mut none = NameBatch::new(NameKind::Lookup, 1);
        assert!(matches!(
            none.answered(1, "x", false, None, &me),
            Some(ToCompanion::LookupResult { status: status::ERR_NOT_FOUND, .. })
        ));
        let mut p = NameBatch::new(NameKind::Publish, 1);
        assert!(matches!(
            p.answered(2, "x", false, None, &me),
            Some(ToCompanion::Done { id: 2, status: status::ERROR })
        ));
    }
}
