//! What the verbs share: sizes on the command line, this process's CPU time, the JSON lines
//! on stdout, latency percentiles.

use std::io::Write;

use serde_json::{json, Value};

/// Parses a size such as `16384`, `4M`, `1G` (binary units).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| format!("bad size {s:?}"))?;
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" => 10,
        "m" | "mib" => 20,
        "g" | "gib" => 30,
        _ => return Err(format!("bad size unit in {s:?} (K, M or G)")),
    };
    n.checked_mul(1 << shift).ok_or_else(|| format!("size {s:?} is too large"))
}

/// This process's CPU time so far: (user, system) seconds, all threads.
pub fn cpu_times() -> Result<(f64, f64), String> {
    // SAFETY: rusage is plain old data, for which all-zero bytes are a valid value, and
    // getrusage only writes the struct it is handed.
    let (rc, ru) = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        (libc::getrusage(libc::RUSAGE_SELF, &mut ru), ru)
    };
    if rc != 0 {
        return Err(format!("getrusage: {}", std::io::Error::last_os_error()));
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok((secs(ru.ru_utime), secs(ru.ru_stime)))
}

pub fn emit(v: &Value) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{v}").and_then(|()| out.flush()).map_err(|e| format!("stdout: {e}"))
}

/// Latency percentiles (µs) of a histogram of nanoseconds.
pub fn latency_json(h: &hdrhistogram::Histogram<u64>) -> Value {
    let us = |ns: u64| ns as f64 / 1e3;
    json!({
        "count": h.len(),
        "avg": h.mean() / 1e3,
        "p50": us(h.value_at_quantile(0.5)),
        "p99": us(h.value_at_quantile(0.99)),
        "p999": us(h.value_at_quantile(0.999)),
        "max": us(h.max()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("16384"), Ok(16384));
        assert_eq!(parse_size("4M"), Ok(4 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert!(parse_size("1T").is_err());
    }
}
