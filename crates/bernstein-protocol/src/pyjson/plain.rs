//! Finding the runs of a JSON string that are written as they stand, eight bytes at a time.
//!
//! Python's encoder writes a string's characters unchanged except `"`, `\`, the control
//! characters and, with `ensure_ascii`, everything outside printable ASCII. The writer copies
//! whole runs between those stops, and the audit verifier's scanner skips them the same way,
//! so both find a run's end here rather than testing byte by byte.

/// How many bytes at the start of `text` are written as they stand in a JSON string: neither
/// `"` nor `\` nor below `0x20`, and with `ensure_ascii` also not above `0x7e`. Eight bytes are
/// tested at a time, and the first stop in a word is found from its mark without walking its
/// bytes; only the last few bytes of `text`, fewer than eight, are tested one by one.
///
/// Without `ensure_ascii` every stop is an ASCII byte, so a run of a `str`'s bytes always ends
/// on a character boundary.
#[must_use]
pub fn plain_run(text: &[u8], ensure_ascii: bool) -> usize {
    let mut at = 0;
    while let Some(word) = text
        .get(at..at + 8)
        .and_then(|chunk| <[u8; 8]>::try_from(chunk).ok())
    {
        let marks = stop_marks(u64::from_le_bytes(word), ensure_ascii);
        if marks != 0 {
            return at + (marks.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    at + text[at..]
        .iter()
        .position(|&b| !is_plain(b, ensure_ascii))
        .unwrap_or(text.len() - at)
}

/// Whether `b` is written as it stands in a JSON string (see [`plain_run`]).
#[must_use]
pub fn is_plain(b: u8, ensure_ascii: bool) -> bool {
    b >= b' ' && b != b'"' && b != b'\\' && !(ensure_ascii && b > b'~')
}

/// The high bit of each byte of `word` (read little-endian) that is not [`is_plain`], by the
/// classic word-at-a-time tests: a byte below `0x20`, a byte above `0x7e` (with
/// `ensure_ascii`), and a byte equal to `"` or `\`. A test's borrow or carry can only mark
/// bytes above (later than) one that truly matches, so the lowest mark is always exact: it is
/// the first stop, and no mark means none.
fn stop_marks(word: u64, ensure_ascii: bool) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let zero_bytes = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS;
    let below_space = word.wrapping_sub(ONES * 0x20) & !word & HIGHS;
    let above_tilde = if ensure_ascii {
        (word.wrapping_add(ONES) | word) & HIGHS
    } else {
        0
    };
    below_space
        | above_tilde
        | zero_bytes(word ^ (ONES * u64::from(b'"')))
        | zero_bytes(word ^ (ONES * u64::from(b'\\')))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The byte-by-byte answer [`plain_run`] must give.
    fn plain_run_bytewise(text: &[u8], ensure_ascii: bool) -> usize {
        text.iter()
            .position(|&b| !is_plain(b, ensure_ascii))
            .unwrap_or(text.len())
    }

    #[test]
    fn a_plain_run_stops_at_the_first_byte_a_string_cannot_hold_as_it_stands() {
        let check = |text: &[u8], ensure_ascii: bool, expect: usize| {
            assert_eq!(
                plain_run(text, ensure_ascii),
                expect,
                "{:?} ensure_ascii={ensure_ascii}",
                String::from_utf8_lossy(text)
            );
            assert_eq!(plain_run_bytewise(text, ensure_ascii), expect);
        };
        for ensure_ascii in [true, false] {
            check(b"", ensure_ascii, 0);
            check(b"abc", ensure_ascii, 3);
            check(b"abcdefgh", ensure_ascii, 8);
            check(b"abcdefghijklmnopq", ensure_ascii, 17);
            check(b"abcdefgh\"", ensure_ascii, 8);
            check(b"abcdefghij\\n", ensure_ascii, 10);
            check(b" ~ ~ ~ ~ ~ ~ ~ ~", ensure_ascii, 16);
        }
        // Every byte that stops a run, at every position of a 24-byte text; without
        // `ensure_ascii` the bytes above `0x7e` stop nothing.
        let stops = (0u8..0x20).chain([b'"', b'\\', 0x7f, 0x80, 0xc3, 0xff]);
        for stop in stops {
            for ensure_ascii in [true, false] {
                let stops_here = ensure_ascii || stop < 0x7f;
                for at in 0..24 {
                    let mut text = vec![b'a'; 24];
                    text[at] = stop;
                    let expect = if stops_here { at } else { 24 };
                    check(&text, ensure_ascii, expect);
                    // A byte below or above the stop, which a borrow or carry could disturb.
                    text[..at].fill(b' ');
                    check(&text, ensure_ascii, expect);
                    text[..at].fill(b'~');
                    check(&text, ensure_ascii, expect);
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// The word-at-a-time run agrees with the byte-by-byte one on any bytes.
        #[test]
        fn plain_runs_agree_with_the_bytewise_test(
            text in prop::collection::vec(
                prop_oneof![any::<u8>(), 0x20u8..0x7f, Just(b'"'), Just(b'\\')],
                0..80,
            ),
            ensure_ascii in any::<bool>(),
        ) {
            prop_assert_eq!(
                plain_run(&text, ensure_ascii),
                plain_run_bytewise(&text, ensure_ascii)
            );
        }
    }
}
