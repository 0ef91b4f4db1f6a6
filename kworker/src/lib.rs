//! kworker: the host-side publication worker that executes nicfs copy lists into the public
//! area. Not built yet: see docs/ARCHITECTURE.md.
