use super::*;
use proptest::prelude::*;

#[test]
fn reads_little_endian_and_names_what_is_short() {
    let b = [1, 2, 0, 3, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 9];
    let mut r = Reader::new(&b);
    assert_eq!(r.u8("a"), Ok(1));
    assert_eq!(r.u16("b"), Ok(2));
    assert_eq!(r.u32("c"), Ok(3));
    assert_eq!(r.u64("d"), Ok(4));
    assert_eq!(r.position(), 15);
    assert_eq!(r.u32("e"), Err(Truncated { what: "e", need: 4, have: 1 }));
    // A failed take takes nothing.
    assert_eq!(r.remaining(), 1);
    assert_eq!(r.rest(), &[9]);
    assert!(r.is_empty());
    assert_eq!(r.bytes("f", 1), Err(Truncated { what: "f", need: 1, have: 0 }));
    assert_eq!(r.skip_at_most(8), 0);
}

#[test]
fn fixed_parts_read_and_build_by_offset() {
    let mut out = Vec::new();
    FixedOut::<16>::new().u8::<0>(7).u16::<2>(0x0102).u32::<4>(0x0304_0506).u64::<8>(u64::MAX - 1).put(&mut out);
    assert_eq!(out, [7, 0, 2, 1, 6, 5, 4, 3, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
    let mut r = Reader::new(&out);
    let f: Fixed<'_, 16> = r.fixed("part").unwrap();
    assert_eq!((f.u8::<0>(), f.u16::<2>(), f.u32::<4>(), f.u64::<8>()), (7, 0x0102, 0x0304_0506, u64::MAX - 1));
    assert_eq!(f.i64::<8>(), -2);
    assert!(f.is_zero::<1, 2>());
    assert!(!f.is_zero::<0, 2>());
    assert_eq!(f.array::<4, 2>(), [6, 5]);
    assert!(r.fixed::<1>("more").is_err());
}

#[test]
fn counts_are_checked_before_allocation() {
    let b = [0u8; 12];
    let r = Reader::new(&b);
    assert_eq!(r.check_count("list", 3, 4, 10), Ok(3));
    assert_eq!(r.check_count("list", 11, 4, 10), Err(CountError::TooMany));
    assert_eq!(r.check_count("list", 4, 4, 10), Err(CountError::Short(Truncated { what: "list", need: 16, have: 12 })));
    assert_eq!(r.check_count("list", u64::MAX, usize::MAX, usize::MAX), Err(CountError::TooMany));
}

/// One read of a random program over random bytes.
#[derive(Debug, Clone)]
enum Op {
    U8,
    U16,
    U32,
    U64,
    Bytes(usize),
    Fixed,
    Skip(usize),
    Count(u64, usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        Just(Op::U8),
        Just(Op::U16),
        Just(Op::U32),
        Just(Op::U64),
        any::<usize>().prop_map(Op::Bytes),
        (0usize..64).prop_map(Op::Bytes),
        Just(Op::Fixed),
        any::<usize>().prop_map(Op::Skip),
        (any::<u64>(), any::<usize>()).prop_map(|(c, s)| Op::Count(c, s)),
    ]
}

#[derive(Debug, Clone, PartialEq)]
enum Value {
    Int(u64),
    Bytes(Vec<u8>),
}

proptest! {
    /// Any program of reads over any bytes: no panic; a read succeeds exactly when its
    /// bytes are there, and a failed one takes nothing.
    #[test]
    fn reading_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64), ops in proptest::collection::vec(op(), 0..32)) {
        let mut r = Reader::new(&bytes);
        for op in ops {
            let before = r.remaining();
            let need = match op {
                Op::U8 => r.u8("x").map(|_| 1),
                Op::U16 => r.u16("x").map(|_| 2),
                Op::U32 => r.u32("x").map(|_| 4),
                Op::U64 => r.u64("x").map(|_| 8),
                Op::Bytes(n) => r.bytes("x", n).map(|b| b.len()),
                Op::Fixed => r.fixed::<12>("x").map(|f| {
                    let _ = (f.u8::<11>(), f.u16::<10>(), f.u32::<8>(), f.u64::<4>(), f.is_zero::<0, 12>());
                    12
                }),
                Op::Skip(n) => Ok(r.skip_at_most(n)),
                Op::Count(c, s) => {
                    if let Ok(n) = r.check_count("x", c, s, 1 << 20) {
                        prop_assert!(n.checked_mul(s).is_some_and(|b| b <= before));
                    }
                    Ok(0)
                }
            };
            match need {
                Ok(n) => prop_assert_eq!(r.remaining(), before - n),
                Err(e) => {
                    prop_assert_eq!(r.remaining(), before);
                    prop_assert_eq!(e.have, before);
                    prop_assert!(e.need > e.have);
                }
            }
        }
    }

    /// What is written reads back, in order, and the bytes are little-endian.
    #[test]
    fn written_values_read_back(values in proptest::collection::vec(
        prop_oneof![
            any::<u64>().prop_map(Value::Int),
            proptest::collection::vec(any::<u8>(), 0..16).prop_map(Value::Bytes),
        ], 0..16)) {
        let mut out = Vec::new();
        for v in &values {
            match v {
                Value::Int(x) => {
                    put_u64(&mut out, *x);
                    put_u32(&mut out, *x as u32);
                    let mut f = FixedOut::<4>::new();
                    f.u16::<0>(*x as u16).u8::<3>(*x as u8);
                    f.put(&mut out);
                }
                Value::Bytes(b) => {
                    put_u32(&mut out, b.len() as u32);
                    out.extend_from_slice(b);
                }
            }
        }
        let mut r = Reader::new(&out);
        for v in &values {
            match v {
                Value::Int(x) => {
                    let at = r.position();
                    prop_assert_eq!(r.u64("v")?, *x);
                    prop_assert_eq!(&out[at..at + 8], &x.to_le_bytes());
                    prop_assert_eq!(r.u32("v")?, *x as u32);
                    let f = r.fixed::<4>("v")?;
                    prop_assert_eq!((f.u16::<0>(), f.u8::<2>(), f.u8::<3>()), (*x as u16, 0, *x as u8));
                }
                Value::Bytes(b) => {
                    let n = r.u32("len")? as usize;
                    prop_assert_eq!(r.bytes("b", n)?, &b[..]);
                }
            }
        }
        prop_assert!(r.is_empty());
    }
}
