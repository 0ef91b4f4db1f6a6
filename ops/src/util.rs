//! Small helpers shared by the verbs: the error type, size parsing and printing, UTC dates,
//! and shell quoting for reports.

use std::fmt;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// Mode of the files `linefs` and its daemons write under DIR (logs, pid and status files,
/// the registry): readable by the owner and its group, never by everyone (they name
/// sessions, uids and paths; docs/SECURITY.md).
pub const PRIVATE_MODE: u32 = 0o640;

/// Opens `path` for appending (creating it), mode [`PRIVATE_MODE`] even if it existed with
/// another.
pub fn open_private_append(path: &Path) -> std::io::Result<std::fs::File> {
    let f = std::fs::OpenOptions::new().create(true).append(true).mode(PRIVATE_MODE).open(path)?;
    f.set_permissions(std::fs::Permissions::from_mode(PRIVATE_MODE))?;
    Ok(f)
}

/// Writes `bytes` to `path` (created or truncated), mode [`PRIVATE_MODE`].
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new().create(true).write(true).truncate(true).mode(PRIVATE_MODE).open(path)?;
    f.set_permissions(std::fs::Permissions::from_mode(PRIVATE_MODE))?;
    f.write_all(bytes)
}

/// A failed verb: a one-line reason, printed as `linefs: VERB: REASON`.
#[derive(Debug)]
pub struct CliError(pub String);

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CliError {}

pub type CliResult<T> = Result<T, CliError>;

/// Builds a [`CliError`] from anything printable.
pub fn fail(msg: impl fmt::Display) -> CliError {
    CliError(msg.to_string())
}

/// Adds context (what failed, on which path) to an error.
pub trait Context<T> {
    fn ctx<D: fmt::Display>(self, what: impl FnOnce() -> D) -> CliResult<T>;
}

impl<T, E: fmt::Display> Context<T> for Result<T, E> {
    fn ctx<D: fmt::Display>(self, what: impl FnOnce() -> D) -> CliResult<T> {
        self.map_err(|e| CliError(format!("{}: {e}", what())))
    }
}

/// Parses a size such as `1G`, `512M`, `64k`, `4096`, `1GiB`, `2T` (binary units).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| format!("bad size {s:?} (e.g. 1G, 512M, 4096)"))?;
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(format!("bad size unit in {s:?} (use K, M, G or T)")),
    };
    n.checked_mul(1u64 << shift).ok_or_else(|| format!("size {s:?} is too large"))
}

/// Prints a byte count with a binary unit (`1.0 GiB`).
pub fn human_size(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

pub fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// `YYYY-MM-DD HH:MM:SS UTC` for seconds since the epoch.
pub fn utc_date(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC", rem / 3600, (rem % 3600) / 60, rem % 60)
}

/// The command line of this process, quoted so that it can be pasted into a shell.
pub fn command_line() -> String {
    std::env::args().map(|a| shell_quote(&a)).collect::<Vec<_>>().join(" ")
}

fn shell_quote(a: &str) -> String {
    let plain = !a.is_empty() && a.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./=,:+@%".contains(&b));
    if plain {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert!(parse_size("1X").is_err());
        assert!(parse_size("G").is_err());
        assert!(parse_size("99999999999T").is_err());
        assert_eq!(human_size(1 << 30), "1.0 GiB");
        assert_eq!(human_size(12), "12 B");
    }

    #[test]
    fn dates() {
        assert_eq!(utc_date(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc_date(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc_date(1_700_000_000), "2023-11-14 22:13:20 UTC");
    }

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("--size"), "--size");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }
}
