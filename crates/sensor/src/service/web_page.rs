//! The service's side of the web page ([`crate::web`]): the snapshot it shows, made from the
//! jobs the control socket sees (each job's state, its published counters, and its `top`: the
//! biggest open flows by bytes and the rules with most hits, ten each).

use std::sync::{Arc, PoisonError};
use std::time::Instant;

use serde_json::{json, Value};

use super::JobList;

/// Flows and rules the page shows per job.
const WEB_TOP: usize = 10;
use crate::config::ServiceConfig;
use crate::{Event, SensorError};

/// Starts the page of `cfg`'s `[web]`, if any, and says where it is.
pub(super) fn start(
    cfg: &ServiceConfig,
    jobs: &JobList,
    started: Instant,
    events: &mut dyn FnMut(Option<&str>, Event),
) -> Result<Option<crate::web::Server>, SensorError> {
    let Some(addr) = cfg.web else {
        return Ok(None);
    };
    let jobs = Arc::clone(jobs);
    let config = cfg.path.display().to_string();
    let snapshot = move || {
        let jobs = jobs.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let list: Vec<Value> = jobs
            .iter()
            .map(|j| {
                json!({
                    "name": j.name,
                    "interface": j.interface,
                    "state": j.state().0,
                    "counters": j.published.counters().unwrap_or(Value::Null),
                    "top": j.published.top(WEB_TOP, weir_flows::TopBy::Bytes),
                })
            })
            .collect();
        json!({
            "pid": std::process::id(),
            "config": config,
            "uptime_s": started.elapsed().as_secs_f64(),
            "jobs": list,
        })
    };
    let server = crate::web::Server::start(addr, Box::new(snapshot))?;
    events(
        None,
        Event::Notice(format!(
            "web page on http://{}/ (read-only)",
            server.local_addr()
        )),
    );
    Ok(Some(server))
}
