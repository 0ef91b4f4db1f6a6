//! Conversions between the persisted timestamps ([`Timespec`]) and `SystemTime`.

use linefs_pm::record::Timespec;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub(crate) fn now() -> Timespec {
    to_ts(SystemTime::now())
}

pub(crate) fn to_ts(t: SystemTime) -> Timespec {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timespec { sec: d.as_secs() as i64, nsec: d.subsec_nanos() },
        Err(e) => {
            let d = e.duration();
            if d.subsec_nanos() == 0 {
                Timespec { sec: -(d.as_secs() as i64), nsec: 0 }
            } else {
                Timespec { sec: -(d.as_secs() as i64) - 1, nsec: 1_000_000_000 - d.subsec_nanos() }
            }
        }
    }
}

pub(crate) fn from_ts(t: Timespec) -> SystemTime {
    if t.sec >= 0 {
        UNIX_EPOCH + Duration::new(t.sec as u64, t.nsec)
    } else {
        UNIX_EPOCH - Duration::from_secs(t.sec.unsigned_abs()) + Duration::from_nanos(t.nsec as u64)
    }
}
