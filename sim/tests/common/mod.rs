//! What the simulator's integration tests share.

use libi_sim::Outcome;

/// How a job that lost an agent must end: it ended, left no rank waiting for an answer,
/// and if it failed, with the front end's status 255 and its line naming the lost agent.
/// `Err`: what is wrong.
pub fn lost_agent_ending(o: &Outcome) -> Result<(), String> {
    if o.end.is_none() {
        return Err(format!("did not end: {:?}", o.message));
    }
    if o.ranks_waiting != 0 {
        return Err(format!("{} ranks left waiting", o.ranks_waiting));
    }
    let m = o.message.clone().unwrap_or_default();
    if o.status != 0 && (o.status != 255 || !m.starts_with("lost the NLA on n")) {
        return Err(format!("status {}: {m}", o.status));
    }
    Ok(())
}
