//! Who may hold one of the HTTP port's connection slots: the admission decision, pure.
//!
//! The port never makes a new client wait behind old ones. A new connection is always accepted
//! and then admitted by [`Slots::admit`]:
//! - if its peer (IP address) already holds `max_per_peer` connections, that peer's oldest
//!   *idle* connection is closed for it;
//! - else, if `max_total` connections are open, the oldest idle connection of the peer holding
//!   the most connections is closed for it;
//! - a connection is *idle* unless a request is being handled on it right now ([`Slots::busy`]);
//!   waiting for request headers, for the next request of a kept-alive connection, or for a
//!   client to read its response all count as idle;
//! - only when every connection that could make room is busy is the new one refused (closed at
//!   once).
//!
//! Why: a probe (kubelet's `/healthz`, `/readyz`) connects and sends its request at once, and
//! its handler answers in microseconds. Clients that connect and stall, however many and from
//! however many addresses, are therefore always the ones closed to make room: the probe is never
//! queued behind them. A peer can never hold more than `max_per_peer` slots, so a flood from one
//! address cannot close the connections of another address; a flood from many addresses
//! closes first the connections of whoever holds the most.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

/// Identifies an admitted connection (increasing: a lower id is an older connection).
pub(crate) type SlotId = u64;

/// The outcome of [`Slots::admit`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Serve the new connection as `id`, after closing `evict` (already released here).
    Admit {
        /// The new connection's slot.
        id: SlotId,
        /// The connection closed to make room, if any.
        evict: Option<SlotId>,
    },
    /// Every connection that could make room is handling a request: close the new one.
    Refuse,
}

#[derive(Debug, Clone)]
struct Entry {
    peer: IpAddr,
    busy: bool,
}

/// The open connections and their limits; see the module docs.
#[derive(Debug)]
pub(crate) struct Slots {
    max_total: usize,
    max_per_peer: usize,
    next: SlotId,
    open: BTreeMap<SlotId, Entry>,
    per_peer: HashMap<IpAddr, usize>,
}

impl Slots {
    /// Limits of at least 1 each (`server.max_connections`, `server.max_connections_per_peer`).
    pub(crate) fn new(max_total: usize, max_per_peer: usize) -> Self {
        Slots {
            max_total: max_total.max(1),
            max_per_peer: max_per_peer.max(1),
            next: 0,
            open: BTreeMap::new(),
            per_peer: HashMap::new(),
        }
    }

    /// Connections open now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.open.len()
    }

    /// Decides about a new connection from `peer` (see the module docs).
    pub(crate) fn admit(&mut self, peer: IpAddr) -> Admission {
        let evict = if self.per_peer.get(&peer).copied().unwrap_or(0) >= self.max_per_peer {
            match self.oldest_idle(|e| e.peer == peer) {
                Some(id) => Some(id),
                None => return Admission::Refuse,
            }
        } else if self.open.len() >= self.max_total {
            match self.oldest_idle_of_largest_peer() {
                Some(id) => Some(id),
                None => return Admission::Refuse,
            }
        } else {
            None
        };
        if let Some(old) = evict {
            self.release(old);
        }
        let id = self.next;
        self.next += 1;
        self.open.insert(id, Entry { peer, busy: false });
        *self.per_peer.entry(peer).or_insert(0) += 1;
        Admission::Admit { id, evict }
    }

    /// Marks whether a request is being handled on `id` (no-op once it was released).
    pub(crate) fn busy(&mut self, id: SlotId, busy: bool) {
        if let Some(e) = self.open.get_mut(&id) {
            e.busy = busy;
        }
    }

    /// Frees `id`'s slot (the connection ended, or was evicted); a second call is a no-op.
    pub(crate) fn release(&mut self, id: SlotId) {
        if let Some(e) = self.open.remove(&id) {
            if let Some(n) = self.per_peer.get_mut(&e.peer) {
                *n -= 1;
                if *n == 0 {
                    self.per_peer.remove(&e.peer);
                }
            }
        }
    }

    fn oldest_idle(&self, pick: impl Fn(&Entry) -> bool) -> Option<SlotId> {
        self.open
            .iter()
            .find(|(_, e)| !e.busy && pick(e))
            .map(|(id, _)| *id)
    }

    fn oldest_idle_of_largest_peer(&self) -> Option<SlotId> {
        // The oldest idle connection among the peers holding the most connections (ids are
        // visited oldest first, so the first maximum found is the oldest).
        let mut best: Option<(usize, SlotId)> = None;
        for (id, e) in &self.open {
            if e.busy {
                continue;
            }
            let n = self.per_peer.get(&e.peer).copied().unwrap_or(0);
            if best.is_none_or(|(m, _)| n > m) {
                best = Some((n, *id));
            }
        }
        best.map(|(_, id)| id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::Ipv4Addr;

    fn ip(n: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, n))
    }

    fn admitted(a: Admission) -> (SlotId, Option<SlotId>) {
        match a {
            Admission::Admit { id, evict } => (id, evict),
            Admission::Refuse => panic!("refused"),
        }
    }

    #[test]
    fn a_peer_at_its_limit_gives_up_its_oldest_idle_connection() {
        let mut s = Slots::new(10, 2);
        let (a, _) = admitted(s.admit(ip(1)));
        let (b, _) = admitted(s.admit(ip(1)));
        let (_, other) = admitted(s.admit(ip(2)));
        assert_eq!(other, None);
        s.busy(a, true);
        let (_, evicted) = admitted(s.admit(ip(1)));
        assert_eq!(evicted, Some(b), "the oldest idle one, not the busy one");
        s.busy(a, false);
        assert_eq!(s.len(), 3);
    }

    #[test]
    fn a_full_port_closes_the_oldest_idle_connection_of_the_largest_peer() {
        let mut s = Slots::new(4, 4);
        let (kubelet, _) = admitted(s.admit(ip(9)));
        let flood: Vec<_> = (0..3).map(|_| admitted(s.admit(ip(1))).0).collect();
        // kubelet's connection is the oldest overall, but 127.0.0.1 holds the most.
        let (_, evicted) = admitted(s.admit(ip(2)));
        assert_eq!(evicted, Some(flood[0]));
        assert!(s.open.contains_key(&kubelet));
    }

    #[test]
    fn refused_only_when_every_candidate_is_busy() {
        let mut s = Slots::new(2, 2);
        let (a, _) = admitted(s.admit(ip(1)));
        let (b, _) = admitted(s.admit(ip(2)));
        s.busy(a, true);
        s.busy(b, true);
        assert_eq!(s.admit(ip(3)), Admission::Refuse);
        s.busy(b, false);
        assert_eq!(admitted(s.admit(ip(3))).1, Some(b));
        s.release(b); // already released by the eviction: a no-op
        assert_eq!(s.len(), 2);
    }

    proptest! {
        /// Whatever the sequence of arrivals, requests and closes: the limits always hold, and a
        /// new connection is refused only when no connection it could replace is idle.
        #[test]
        fn limits_always_hold(
            max_total in 1usize..8,
            max_per_peer in 1usize..8,
            ops in proptest::collection::vec((0u8..4, 0u8..5, any::<bool>()), 1..200),
        ) {
            let mut s = Slots::new(max_total, max_per_peer);
            let mut live: Vec<SlotId> = Vec::new();
            for (op, peer, flag) in ops {
                match op {
                    0 | 1 => {
                        let idle_same = s.open.values().any(|e| !e.busy && e.peer == ip(peer));
                        let idle_any = s.open.values().any(|e| !e.busy);
                        let at_peer_limit = s.per_peer.get(&ip(peer)).copied().unwrap_or(0) >= max_per_peer;
                        let full = s.len() >= max_total;
                        match s.admit(ip(peer)) {
                            Admission::Admit { id, evict } => {
                                if let Some(e) = evict {
                                    live.retain(|x| *x != e);
                                }
                                prop_assert_eq!(evict.is_some(), at_peer_limit || full);
                                live.push(id);
                            }
                            Admission::Refuse => {
                                let expected = if at_peer_limit { !idle_same } else { full && !idle_any };
                                prop_assert!(expected);
                            }
                        }
                    }
                    2 => if let Some(&id) = live.get(peer as usize) {
                        s.busy(id, flag);
                    },
                    _ => if let Some(&id) = live.get(peer as usize) {
                        s.release(id);
                        live.retain(|x| *x != id);
                    },
                }
                prop_assert!(s.len() <= max_total);
                prop_assert_eq!(s.len(), live.len());
                for n in s.per_peer.values() {
                    prop_assert!(*n <= max_per_peer && *n > 0);
                }
            }
        }
    }
}
