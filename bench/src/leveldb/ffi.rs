//! A minimal binding to LevelDB's C API (`leveldb/c.h`, LevelDB 1.23 from Debian's
//! `libleveldb-dev`; linked by `cli/build.rs`), and [`Db`], a small safe wrapper over it:
//! open, put (with or without sync), get, a forward iterator, close on drop.
//!
//! Only the functions the bench uses are declared. Errors come back from LevelDB as a
//! `malloc`ed C string in `*errptr`; [`take_error`] copies it into an [`Error`] and frees it
//! with `leveldb_free`.

use std::ffi::{c_char, c_void, CStr, CString};
use std::fmt;
use std::path::Path;
use std::ptr::{self, NonNull};

#[repr(C)]
struct RawDb {
    _private: [u8; 0],
}
#[repr(C)]
struct RawOptions {
    _private: [u8; 0],
}
#[repr(C)]
struct RawReadOptions {
    _private: [u8; 0],
}
#[repr(C)]
struct RawWriteOptions {
    _private: [u8; 0],
}
#[repr(C)]
struct RawIterator {
    _private: [u8; 0],
}

extern "C" {
    fn leveldb_open(options: *const RawOptions, name: *const c_char, errptr: *mut *mut c_char) -> *mut RawDb;
    fn leveldb_close(db: *mut RawDb);
    fn leveldb_put(
        db: *mut RawDb,
        options: *const RawWriteOptions,
        key: *const c_char,
        keylen: usize,
        val: *const c_char,
        vallen: usize,
        errptr: *mut *mut c_char,
    );
    fn leveldb_get(
        db: *mut RawDb,
        options: *const RawReadOptions,
        key: *const c_char,
        keylen: usize,
        vallen: *mut usize,
        errptr: *mut *mut c_char,
    ) -> *mut c_char;
    fn leveldb_destroy_db(options: *const RawOptions, name: *const c_char, errptr: *mut *mut c_char);
    fn leveldb_create_iterator(db: *mut RawDb, options: *const RawReadOptions) -> *mut RawIterator;
    fn leveldb_iter_destroy(it: *mut RawIterator);
    fn leveldb_iter_valid(it: *const RawIterator) -> u8;
    fn leveldb_iter_seek_to_first(it: *mut RawIterator);
    fn leveldb_iter_next(it: *mut RawIterator);
    fn leveldb_iter_key(it: *const RawIterator, klen: *mut usize) -> *const c_char;
    fn leveldb_iter_value(it: *const RawIterator, vlen: *mut usize) -> *const c_char;
    fn leveldb_iter_get_error(it: *const RawIterator, errptr: *mut *mut c_char);
    fn leveldb_options_create() -> *mut RawOptions;
    fn leveldb_options_destroy(o: *mut RawOptions);
    fn leveldb_options_set_create_if_missing(o: *mut RawOptions, v: u8);
    fn leveldb_readoptions_create() -> *mut RawReadOptions;
    fn leveldb_readoptions_destroy(o: *mut RawReadOptions);
    fn leveldb_writeoptions_create() -> *mut RawWriteOptions;
    fn leveldb_writeoptions_destroy(o: *mut RawWriteOptions);
    fn leveldb_writeoptions_set_sync(o: *mut RawWriteOptions, v: u8);
    fn leveldb_free(ptr: *mut c_void);
}

/// A LevelDB error: what LevelDB said (its `Status::ToString()`), and what we were doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub op: &'static str,
    pub message: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "leveldb {}: {}", self.op, self.message)
    }
}

impl std::error::Error for Error {}

/// Turns the error slot LevelDB filled in (or left null) into a result, freeing the message.
fn take_error(op: &'static str, err: *mut c_char) -> Result<(), Error> {
    if err.is_null() {
        return Ok(());
    }
    // SAFETY: LevelDB sets `*errptr` to a NUL-terminated string it allocated with malloc
    // (`SaveError` in db/c.cc); we read it once, then free it with leveldb_free exactly once.
    let message = unsafe {
        let m = CStr::from_ptr(err).to_string_lossy().into_owned();
        leveldb_free(err.cast());
        m
    };
    Err(Error { op, message })
}

fn c_path(op: &'static str, path: &Path) -> Result<CString, Error> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error { op, message: format!("{}: path holds a NUL byte", path.display()) })
}

/// Owned `leveldb_options_t`: LevelDB's defaults (4 MiB write buffer, 8 MiB block cache,
/// Snappy compression when the library has it, 1000 open files), plus create_if_missing.
struct Options(NonNull<RawOptions>);

impl Options {
    fn new() -> Options {
        // SAFETY: leveldb_options_create allocates a fresh options object (never null: it is
        // `new`); we own it and set a flag on it before anyone else sees it.
        let raw = unsafe {
            let o = leveldb_options_create();
            leveldb_options_set_create_if_missing(o, 1);
            o
        };
        Options(NonNull::new(raw).expect("leveldb_options_create returned null"))
    }
}

impl Drop for Options {
    fn drop(&mut self) {
        // SAFETY: we own the pointer, created by leveldb_options_create; destroyed once.
        unsafe { leveldb_options_destroy(self.0.as_ptr()) }
    }
}

/// Owned `leveldb_writeoptions_t`; `sync` makes every write fsync LevelDB's log first.
pub struct WriteOptions(NonNull<RawWriteOptions>);

impl WriteOptions {
    pub fn new(sync: bool) -> WriteOptions {
        // SAFETY: leveldb_writeoptions_create allocates a fresh object we own; set_sync only
        // writes a field of it.
        let raw = unsafe {
            let o = leveldb_writeoptions_create();
            leveldb_writeoptions_set_sync(o, u8::from(sync));
            o
        };
        WriteOptions(NonNull::new(raw).expect("leveldb_writeoptions_create returned null"))
    }
}

impl Drop for WriteOptions {
    fn drop(&mut self) {
        // SAFETY: we own the pointer, created by leveldb_writeoptions_create; destroyed once.
        unsafe { leveldb_writeoptions_destroy(self.0.as_ptr()) }
    }
}

/// Owned `leveldb_readoptions_t` with LevelDB's defaults.
struct ReadOptions(NonNull<RawReadOptions>);

impl ReadOptions {
    fn new() -> ReadOptions {
        // SAFETY: allocates a fresh object that we own.
        let raw = unsafe { leveldb_readoptions_create() };
        ReadOptions(NonNull::new(raw).expect("leveldb_readoptions_create returned null"))
    }
}

impl Drop for ReadOptions {
    fn drop(&mut self) {
        // SAFETY: we own the pointer, created by leveldb_readoptions_create; destroyed once.
        unsafe { leveldb_readoptions_destroy(self.0.as_ptr()) }
    }
}

/// An open LevelDB database; closed (LevelDB's `delete db`) when dropped.
pub struct Db {
    raw: NonNull<RawDb>,
    read: ReadOptions,
}

// SAFETY: a leveldb::DB is safe for concurrent use from several threads (LevelDB's
// documented threading model); the read options we keep beside it are never modified.
unsafe impl Send for Db {}

impl Db {
    /// Opens (creating if missing) the database in directory `path`.
    pub fn open(path: &Path) -> Result<Db, Error> {
        let name = c_path("open", path)?;
        let options = Options::new();
        let mut err = ptr::null_mut();
        // SAFETY: options and name are valid for the call; err is a valid out slot that
        // LevelDB leaves null or fills with a malloc'ed message (handled by take_error).
        let raw = unsafe { leveldb_open(options.0.as_ptr(), name.as_ptr(), &mut err) };
        take_error("open", err)?;
        let raw = NonNull::new(raw).ok_or(Error { op: "open", message: "null handle".to_string() })?;
        Ok(Db { raw, read: ReadOptions::new() })
    }

    /// Deletes the database in `path` (LevelDB's DestroyDB: its files, then the directory).
    pub fn destroy(path: &Path) -> Result<(), Error> {
        let name = c_path("destroy", path)?;
        let options = Options::new();
        let mut err = ptr::null_mut();
        // SAFETY: options and name are valid for the call; err as in `open`.
        unsafe { leveldb_destroy_db(options.0.as_ptr(), name.as_ptr(), &mut err) };
        take_error("destroy", err)
    }

    pub fn put(&self, w: &WriteOptions, key: &[u8], value: &[u8]) -> Result<(), Error> {
        let mut err = ptr::null_mut();
        // SAFETY: db and options are live; key and value are valid for their lengths and
        // LevelDB copies them before returning; err as in `open`.
        unsafe {
            leveldb_put(
                self.raw.as_ptr(),
                w.0.as_ptr(),
                key.as_ptr().cast(),
                key.len(),
                value.as_ptr().cast(),
                value.len(),
                &mut err,
            )
        };
        take_error("put", err)
    }

    /// The value stored under `key`, or None.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        let mut err = ptr::null_mut();
        let mut len = 0usize;
        // SAFETY: db and options are live; key is valid for its length; len and err are
        // valid out slots.
        let v = unsafe {
            leveldb_get(self.raw.as_ptr(), self.read.0.as_ptr(), key.as_ptr().cast(), key.len(), &mut len, &mut err)
        };
        take_error("get", err)?;
        if v.is_null() {
            return Ok(None);
        }
        // SAFETY: a non-null result is a malloc'ed array of `len` bytes that we now own: copy
        // it, then free it once with leveldb_free.
        let out = unsafe {
            let out = std::slice::from_raw_parts(v.cast::<u8>(), len).to_vec();
            leveldb_free(v.cast());
            out
        };
        Ok(Some(out))
    }

    /// A forward iterator over every key in order, from the first.
    pub fn iter(&self) -> Iter<'_> {
        // SAFETY: db and read options are live; the iterator borrows the db (the lifetime on
        // Iter keeps the db open until the iterator is destroyed).
        let raw = unsafe {
            let it = leveldb_create_iterator(self.raw.as_ptr(), self.read.0.as_ptr());
            leveldb_iter_seek_to_first(it);
            it
        };
        Iter { raw: NonNull::new(raw).expect("leveldb_create_iterator returned null"), started: false, _db: self }
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        // SAFETY: we own the handle from leveldb_open; every Iter borrowing it is gone
        // (lifetimes); closed once.
        unsafe { leveldb_close(self.raw.as_ptr()) }
    }
}

/// A (key, value) pair lent by [`Iter::next_entry`].
pub type Entry<'a> = (&'a [u8], &'a [u8]);

/// A LevelDB iterator; [`Iter::next_entry`] lends each key and value until the next call.
pub struct Iter<'a> {
    raw: NonNull<RawIterator>,
    started: bool,
    _db: &'a Db,
}

impl Iter<'_> {
    /// The next (key, value), or None at the end; an error if LevelDB hit one (e.g. a
    /// corrupt or unreadable table file).
    pub fn next_entry(&mut self) -> Result<Option<Entry<'_>>, Error> {
        let it = self.raw.as_ptr();
        // SAFETY: the iterator is live; next is only called on a valid iterator (the first
        // call uses the position seek_to_first left).
        let valid = unsafe {
            if self.started && leveldb_iter_valid(it) != 0 {
                leveldb_iter_next(it);
            }
            self.started = true;
            leveldb_iter_valid(it) != 0
        };
        if !valid {
            let mut err = ptr::null_mut();
            // SAFETY: the iterator is live; err is a valid out slot.
            unsafe { leveldb_iter_get_error(it, &mut err) };
            take_error("iterate", err)?;
            return Ok(None);
        }
        let (mut kl, mut vl) = (0usize, 0usize);
        // SAFETY: the iterator is valid, so key and value point at kl and vl bytes that stay
        // put until the iterator moves, which needs &mut self: the borrow we return ends first.
        let kv = unsafe {
            let k = leveldb_iter_key(it, &mut kl);
            let v = leveldb_iter_value(it, &mut vl);
            (std::slice::from_raw_parts(k.cast::<u8>(), kl), std::slice::from_raw_parts(v.cast::<u8>(), vl))
        };
        Ok(Some(kv))
    }
}

impl Drop for Iter<'_> {
    fn drop(&mut self) {
        // SAFETY: we own the iterator from leveldb_create_iterator; destroyed once, before
        // the db it borrows is closed.
        unsafe { leveldb_iter_destroy(self.raw.as_ptr()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_get_iterate_sync_and_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        {
            let db = Db::open(&path).unwrap();
            let w = WriteOptions::new(false);
            let ws = WriteOptions::new(true);
            db.put(&w, b"b", b"2").unwrap();
            db.put(&ws, b"a", b"1").unwrap();
            assert_eq!(db.get(b"a").unwrap().as_deref(), Some(&b"1"[..]));
            assert_eq!(db.get(b"zz").unwrap(), None);
            let mut it = db.iter();
            let mut seen = Vec::new();
            while let Some((k, v)) = it.next_entry().unwrap() {
                seen.push((k.to_vec(), v.to_vec()));
            }
            assert_eq!(seen, vec![(b"a".to_vec(), b"1".to_vec()), (b"b".to_vec(), b"2".to_vec())]);
            // A second open of the same db fails on LevelDB's LOCK file, with its message.
            let e = Db::open(&path).err().expect("second open must fail");
            assert!(e.message.to_lowercase().contains("lock"), "{e}");
        }
        let db = Db::open(&path).unwrap();
        assert_eq!(db.get(b"b").unwrap().as_deref(), Some(&b"2"[..]));
        drop(db);
        Db::destroy(&path).unwrap();
        assert!(!path.join("CURRENT").exists());
    }
}
