//! Tests of the trace module.

use super::*;
use crate::PmRegion;
use proptest::prelude::*;

fn opts() -> CrashOpts {
    CrashOpts::default()
}

fn region() -> PmRegion {
    PmRegion::traced(16 * 1024)
}

#[test]
fn store_dirties_persist_fence_makes_durable() {
    let r = region();
    let t = r.tracer().unwrap();
    r.write(100, b"hello").unwrap();
    assert_eq!(t.pending_lines().len(), 1);
    assert_eq!(t.pending_lines()[0].off, 64);
    assert!(!t.pending_lines()[0].flush_pending);
    assert_eq!(&t.durable_image()[100..105], &[0; 5]);
    assert_eq!(&t.live_image()[100..105], b"hello");
    r.persist(100, 5).unwrap();
    assert!(t.pending_lines()[0].flush_pending);
    assert_eq!(&t.durable_image()[100..105], &[0; 5]);
    r.fence();
    assert!(t.pending_lines().is_empty());
    assert_eq!(&t.durable_image()[100..105], b"hello");
    assert_eq!(t.fence_count(), 1);
}

#[test]
fn store_after_persist_is_not_covered_by_the_fence() {
    let r = region();
    let t = r.tracer().unwrap();
    r.write(0, b"AAAA").unwrap();
    r.persist(0, 4).unwrap();
    r.write(0, b"BBBB").unwrap();
    r.fence();
    assert_eq!(&t.durable_image()[0..4], b"AAAA");
    let p = t.pending_lines();
    assert_eq!(p.len(), 1);
    assert_eq!(&p[0].live[0..4], b"BBBB");
    assert_eq!(&p[0].durable[0..4], b"AAAA");
    assert!(!p[0].flush_pending);
}

#[test]
fn line_spanning_store_and_restoring_store() {
    let r = region();
    let t = r.tracer().unwrap();
    r.write(60, &[1; 10]).unwrap(); // lines 0 and 64
    assert_eq!(t.pending_lines().iter().map(|l| l.off).collect::<Vec<_>>(), vec![0, 64]);
    r.zero(60, 10).unwrap(); // back to the durable content
    assert!(t.pending_lines().is_empty());
}

#[test]
fn persist_without_dirty_lines_is_harmless() {
    let r = region();
    let t = r.tracer().unwrap();
    r.persist_now(0, 4096).unwrap();
    assert!(t.pending_lines().is_empty());
    assert_eq!(t.durable_image(), vec![0; 16 * 1024]);
}

#[test]
fn crash_points_at_fences_and_checkpoints() {
    let r = region();
    let t = r.tracer().unwrap();
    r.write(0, b"before").unwrap();
    r.persist_now(0, 6).unwrap(); // not recorded
    t.checkpoint("ignored");
    t.start_recording();
    r.write(128, b"x").unwrap();
    r.persist(128, 1).unwrap();
    r.fence(); // point 0: "fence 2", 1 pending (flush pending)
    t.checkpoint("after op"); // point 1: nothing pending
    r.write(256, b"y").unwrap();
    r.write(512, b"z").unwrap();
    t.checkpoint("two dirty"); // point 2
    let pts = t.crash_points();
    assert_eq!(pts.iter().map(|p| p.label.as_str()).collect::<Vec<_>>(), vec!["fence 2", "after op", "two dirty"]);
    assert_eq!(pts[0].index, 0);
    assert_eq!(pts[0].pending_count(), 1);
    assert_eq!(pts[1].pending_count(), 0);
    assert_eq!(pts[2].pending_count(), 2);
    // Durable image of point 0 has "before" but not "x"; point 1 has both.
    let d0 = pts[0].durable_image();
    assert_eq!(&d0[0..6], b"before");
    assert_eq!(d0[128], 0);
    let d1 = pts[1].durable_image();
    assert_eq!(d1[128], b'x');
    // Zero pending lines: exactly the durable image.
    let imgs: Vec<_> = pts[1].images(&opts()).collect();
    assert_eq!(imgs.len(), 1);
    assert_eq!(imgs[0].image, d1);
    // Two pending lines: 4 images, each byte present or absent independently.
    let imgs: Vec<_> = pts[2].images(&opts()).collect();
    assert_eq!(imgs.len(), 4);
    let mut seen = HashSet::new();
    for i in &imgs {
        assert_eq!(i.image[128], b'x');
        seen.insert((i.image[256], i.image[512]));
    }
    assert_eq!(seen.len(), 4);
    let ev = t.events();
    assert!(matches!(ev[0], TraceEvent::Store { off: 128, len: 1 }));
    assert!(ev.contains(&TraceEvent::Fence { n: 2 }));
}

#[test]
fn deltas_shared_with_old_points_stay_correct() {
    let r = region();
    let t = r.tracer().unwrap();
    t.start_recording();
    r.write(0, b"1").unwrap();
    r.persist_now(0, 1).unwrap();
    let early = t.crash_points(); // holds the delta list
    r.write(0, b"2").unwrap();
    r.persist_now(0, 1).unwrap();
    let late = t.crash_points();
    assert_eq!(early.len(), 1);
    assert_eq!(early[0].durable_image()[0], 0);
    assert_eq!(late[1].durable_image()[0], b'1');
    assert_eq!(t.durable_image()[0], b'2');
}

#[test]
fn bounded_enumeration_beyond_max_exhaustive() {
    let r = region();
    let t = r.tracer().unwrap();
    t.start_recording();
    let n = 12usize;
    for i in 0..n {
        r.write((i * 64) as u64, &[i as u8 + 1; 8]).unwrap();
    }
    t.checkpoint("12 dirty");
    let p = &t.crash_points()[0];
    assert_eq!(p.pending_count(), n);
    let o = CrashOpts { max_exhaustive: 8, samples: 10, seed: 7, ..CrashOpts::default() };
    let imgs: Vec<_> = p.images(&o).collect();
    // none + all + n singles + n all-but-one + (n - 3) prefixes + up to 10 random
    let structured = 2 + n + n + (n - 3);
    assert!(imgs.len() >= structured && imgs.len() <= structured + 10);
    assert!(imgs[0].image.iter().all(|b| *b == 0));
    assert!((0..n).all(|i| imgs[1].image[i * 64] == i as u8 + 1));
    let distinct: HashSet<_> = imgs.iter().map(|i| i.image.clone()).collect();
    assert_eq!(distinct.len(), imgs.len());
    // Deterministic for a seed.
    let again: Vec<_> = p.images(&o).map(|i| i.description).collect();
    assert_eq!(again, imgs.iter().map(|i| i.description.clone()).collect::<Vec<_>>());
}

#[test]
fn torn_words_keep_aligned_words_whole() {
    let r = region();
    let t = r.tracer().unwrap();
    t.start_recording();
    for w in 0..8u64 {
        r.write_u64(w * 8, 0x1111_1111_1111_1111 * (w + 1)).unwrap();
    }
    r.write(64, &[9; 64]).unwrap();
    t.checkpoint("two lines");
    let p = &t.crash_points()[0];
    let o = CrashOpts { torn_words: true, ..CrashOpts::default() };
    let imgs: Vec<_> = p.images(&o).collect();
    assert_eq!(imgs.len(), 4 + 4);
    let torn: Vec<_> = imgs.iter().filter(|i| i.description.contains("torn")).collect();
    assert_eq!(torn.len(), 4);
    for i in &torn {
        let mut new = 0;
        for w in 0..8u64 {
            let v = u64::from_le_bytes(i.image[w as usize * 8..][..8].try_into().unwrap());
            assert!(v == 0 || v == 0x1111_1111_1111_1111 * (w + 1), "word torn");
            new += usize::from(v != 0);
        }
        // Line 0 torn: strictly partial; line 1 torn: line 0 absent or fully present.
        assert!(new < 8 || i.description.contains("torn line 1"));
    }
}

#[test]
fn traced_from_image_starts_durable() {
    let img: Vec<u8> = (0..8192u32).map(|i| i as u8).collect();
    let r = PmRegion::traced_from_image(img.clone());
    let t = r.tracer().unwrap();
    assert_eq!(t.durable_image(), img);
    assert_eq!(t.live_image(), img);
    assert!(t.pending_lines().is_empty());
    let mut b = [0u8; 4];
    r.read(8188, &mut b).unwrap();
    assert_eq!(b, [252, 253, 254, 255]);
}

#[test]
fn odd_sized_region_last_partial_line() {
    let r = PmRegion::traced(100);
    let t = r.tracer().unwrap();
    r.write(90, &[5; 10]).unwrap();
    assert_eq!(t.pending_lines()[0].live.len(), 36);
    t.start_recording();
    t.checkpoint("c");
    let o = CrashOpts { torn_words: true, ..CrashOpts::default() };
    assert_eq!(t.crash_points()[0].images(&o).count(), 2 + 2);
    r.persist_now(64, 36).unwrap();
    assert_eq!(&t.durable_image()[90..], &[5; 10]);
    assert!(r.write(91, &[0; 10]).is_err());
}

#[derive(Debug, Clone)]
enum Op {
    Write { off: u64, len: usize, val: u8 },
    WriteU64 { word: u64, val: u64 },
    Persist { off: u64, len: u64 },
    Fence,
}

const AREA: u64 = 1024;

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..AREA, 1usize..100, any::<u8>()).prop_map(|(off, len, val)| Op::Write {
            off,
            len: len.min((AREA - off) as usize),
            val
        }),
        1 => (0..AREA / 8, any::<u64>()).prop_map(|(word, val)| Op::WriteU64 { word, val }),
        2 => (0..AREA, 0u64..300).prop_map(|(off, len)| Op::Persist {
            off,
            len: len.min(AREA - off)
        }),
        2 => Just(Op::Fence),
    ]
}

/// What the test expects at a crash point.
struct Expect {
    live: Vec<u8>,
    /// byte's latest value was persisted and fenced before this point
    stable: Vec<bool>,
    /// every value the byte ever held
    history: Vec<HashSet<u8>>,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    #[test]
    fn crash_images_respect_persistency(ops in prop::collection::vec(op(), 1..40), seed in any::<u64>()) {
        let r = PmRegion::traced(AREA * 2);
        let t = r.tracer().unwrap();
        t.start_recording();
        let n = AREA as usize;
        let mut live = vec![0u8; n];
        let mut stable = vec![true; n];
        let mut persisted = vec![false; n];
        let mut history: Vec<HashSet<u8>> = vec![HashSet::from([0u8]); n];
        let mut expects = Vec::new();
        let mut store = |off: usize, data: &[u8], live: &mut Vec<u8>, stable: &mut Vec<bool>, persisted: &mut Vec<bool>| {
            for (i, b) in data.iter().enumerate() {
                live[off + i] = *b;
                stable[off + i] = false;
                persisted[off + i] = false;
                history[off + i].insert(*b);
            }
        };
        for op in &ops {
            match *op {
                Op::Write { off, len, val } => {
                    let data = vec![val; len];
                    r.write(off, &data).unwrap();
                    store(off as usize, &data, &mut live, &mut stable, &mut persisted);
                }
                Op::WriteU64 { word, val } => {
                    r.write_u64(word * 8, val).unwrap();
                    store(word as usize * 8, &val.to_le_bytes(), &mut live, &mut stable, &mut persisted);
                }
                Op::Persist { off, len } => {
                    r.persist(off, len).unwrap();
                    for p in &mut persisted[off as usize..(off + len) as usize] {
                        *p = true;
                    }
                }
                Op::Fence => {
                    expects.push((live.clone(), stable.clone()));
                    r.fence();
                    for i in 0..n {
                        if persisted[i] {
                            stable[i] = true;
                            persisted[i] = false;
                        }
                    }
                }
            }
        }
        t.checkpoint("end");
        expects.push((live.clone(), stable.clone()));
        let points = t.crash_points();
        prop_assert_eq!(points.len(), expects.len());
        let o = CrashOpts { max_exhaustive: 6, samples: 8, seed, torn_words: true, ..CrashOpts::default() };
        for (p, (live, stable)) in points.iter().zip(expects) {
            let e = Expect { live, stable, history: history.clone() };
            let durable = p.durable_image();
            let mut count = 0usize;
            let mut present = vec![false; n];
            let mut absent = vec![false; n];
            for img in p.images(&o) {
                count += 1;
                prop_assert_eq!(img.image.len(), AREA as usize * 2);
                prop_assert!(img.image[n..].iter().all(|b| *b == 0));
                for i in 0..n {
                    let b = img.image[i];
                    if e.stable[i] {
                        prop_assert_eq!(b, e.live[i], "persisted+fenced byte {} lost at {}: {}", i, p.label, img.description);
                    }
                    prop_assert!(e.history[i].contains(&b), "byte {} invented", i);
                    if b == e.live[i] { present[i] = true; }
                    if b == durable[i] { absent[i] = true; }
                }
            }
            let k = p.pending_count();
            if k == 0 {
                prop_assert_eq!(count, 1);
            } else if k <= 6 {
                let torn = p.pending_lines().iter().filter(|l| l.live.len() > 8).count() * 2;
                prop_assert_eq!(count, (1usize << k) + torn);
            }
            // Every not-yet-durable byte can be both present and absent.
            prop_assert!(present.iter().all(|x| *x));
            prop_assert!(absent.iter().all(|x| *x));
        }
    }
}
