//! Which signals the drivers watch, and what a signal means to an agent. The drivers only
//! register the handlers named here and pass on the number of each signal that arrives;
//! what it means is decided here (an agent's: [`AgentSignals`]) or by the root core (the
//! front end's: [`RootCore::signal`](crate::proto::root::RootCore::signal)).

/// The signals an agent (`libi-nla`) watches once it has its setup (before that, SIGTERM's
/// and SIGHUP's default actions end it: nothing of its own runs yet).
pub const AGENT_SIGNALS: [i32; 2] = [libc::SIGHUP, libc::SIGTERM];

/// What a signal that reached an agent means ([`AgentSignals::on_signal`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Meaning {
    /// The parent is lost, for this reason
    /// ([`NodeCore::parent_lost`](crate::proto::node::NodeCore::parent_lost)): the ranks are
    /// torn down and nothing of theirs is left.
    ParentLost(String),
    /// Pass this signal on to the ranks and the NLAs below, as the parent's `Msg::Signal`
    /// would be.
    Forward(i32),
    /// Nothing.
    Ignore,
}

/// An agent's signal policy.
///
/// * SIGHUP (an ssh session's end, a user's `kill -HUP`): the loss of the parent, the first
///   time; later ones change nothing.
/// * SIGTERM (a batch system stopping the job, a user's `kill`, our parent-death signal
///   under the fork launcher): the first is passed on to the ranks and the NLAs below, as
///   the front end passes on its own; they get the time they take to stop (when the parent
///   is gone, its lost link tears them down anyway). The second tears them down, as the
///   loss of the parent; later ones change nothing.
/// * Any other signal: nothing (an agent watches only [`AGENT_SIGNALS`]).
#[derive(Debug, Default)]
pub struct AgentSignals {
    hangups: u32,
    terms: u32,
}

impl AgentSignals {
    /// Signal `sig` arrived: what it means now.
    pub fn on_signal(&mut self, sig: i32) -> Meaning {
        match sig {
            libc::SIGHUP => {
                self.hangups += 1;
                if self.hangups == 1 {
                    Meaning::ParentLost("killed by SIGHUP".into())
                } else {
                    Meaning::Ignore
                }
            }
            libc::SIGTERM => {
                self.terms += 1;
                match self.terms {
                    1 => Meaning::Forward(libc::SIGTERM),
                    2 => Meaning::ParentLost("killed by a second SIGTERM".into()),
                    _ => Meaning::Ignore,
                }
            }
            _ => Meaning::Ignore,
        }
    }
}

/// The signals the front end watches, each passed to the root core as it arrives: SIGINT,
/// SIGTERM, SIGUSR1, SIGUSR2 and SIGALRM always; SIGHUP and SIGQUIT only when `ignored`
/// (whether the signal's disposition was `SIG_IGN` when we started) says they are not: under
/// `nohup`, or as a script's background job, they stay ignored.
pub fn front_end_signals(ignored: impl Fn(i32) -> bool) -> Vec<i32> {
    let mut sigs = vec![libc::SIGINT, libc::SIGTERM, libc::SIGUSR1, libc::SIGUSR2, libc::SIGALRM];
    for sig in [libc::SIGHUP, libc::SIGQUIT] {
        if !ignored(sig) {
            sigs.push(sig);
        }
    }
    sigs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_sigterm_is_passed_on_a_second_loses_the_parent() {
        let mut s = AgentSignals::default();
        assert_eq!(s.on_signal(libc::SIGTERM), Meaning::Forward(libc::SIGTERM));
        assert_eq!(
            s.on_signal(libc::SIGTERM),
            Meaning::ParentLost("killed by a second SIGTERM".into())
        );
        assert_eq!(s.on_signal(libc::SIGTERM), Meaning::Ignore);
        assert_eq!(s.on_signal(libc::SIGTERM), Meaning::Ignore);
    }

    #[test]
    fn sighup_loses_the_parent_once() {
        let mut s = AgentSignals::default();
        assert_eq!(s.on_signal(libc::SIGHUP), Meaning::ParentLost("killed by SIGHUP".into()));
        assert_eq!(s.on_signal(libc::SIGHUP), Meaning::Ignore);
    }

    /// SIGHUP and SIGTERM are counted apart: a SIGHUP does not make the next SIGTERM the
    /// second, nor the other way round.
    #[test]
    fn sighup_and_sigterm_are_counted_apart() {
        let mut s = AgentSignals::default();
        assert_eq!(s.on_signal(libc::SIGHUP), Meaning::ParentLost("killed by SIGHUP".into()));
        assert_eq!(s.on_signal(libc::SIGTERM), Meaning::Forward(libc::SIGTERM));
        let mut s = AgentSignals::default();
        assert_eq!(s.on_signal(libc::SIGTERM), Meaning::Forward(libc::SIGTERM));
        assert_eq!(s.on_signal(libc::SIGHUP), Meaning::ParentLost("killed by SIGHUP".into()));
    }

    #[test]
    fn other_signals_mean_nothing_to_an_agent() {
        let mut s = AgentSignals::default();
        for sig in [libc::SIGINT, libc::SIGUSR1, libc::SIGQUIT, libc::SIGALRM, 0, -1, 1000] {
            assert_eq!(s.on_signal(sig), Meaning::Ignore, "{sig}");
        }
        assert_eq!(s.on_signal(libc::SIGTERM), Meaning::Forward(libc::SIGTERM));
    }

    #[test]
    fn the_front_end_watches_sighup_and_sigquit_only_when_not_ignored() {
        let always = [libc::SIGINT, libc::SIGTERM, libc::SIGUSR1, libc::SIGUSR2, libc::SIGALRM];
        let mut all = always.to_vec();
        all.extend([libc::SIGHUP, libc::SIGQUIT]);
        assert_eq!(front_end_signals(|_| false), all);
        assert_eq!(front_end_signals(|_| true), always);
        let mut no_hup = always.to_vec();
        no_hup.push(libc::SIGQUIT);
        assert_eq!(front_end_signals(|s| s == libc::SIGHUP), no_hup);
    }
}
