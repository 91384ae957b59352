//! The process's machinery that every part shares and no decision names: the keyed work queue,
//! the fence every side effect passes, the HTTP endpoints, the log format, the crash points,
//! the panic policy, the Event recorder and the intent journal's log.

pub mod crash_point;
pub mod events;
pub mod failing;
pub mod fence;
pub mod http;
pub mod journal;
pub mod logs;
pub mod panics;
pub mod queue;
