//! A `memcmp` (and `bcmp`) for Wasm guests that compares eight bytes at a
//! time.
//!
//! Why: the C library a `wasm32-wasip2` guest links (wasi-libc) compares
//! one byte per loop iteration (as does the `compiler-builtins` one a
//! `wasm32-unknown-unknown` guest gets), and in a guest every loop iteration also
//! checks the host's epoch deadline. Every `String` ordering goes through
//! `memcmp`, so building the `BTreeMap`s of an object's labels and
//! annotations (keys that share long prefixes, like `example.com/…`) spent
//! about a tenth of a 16 KiB reconcile there. Defining the symbol in the
//! SDK keeps the linker from taking wasi-libc's.
//!
//! The `memcmp` feature (on by default) exports them; a plugin that links
//! another `memcmp` turns it off (`default-features = false`).
//!
//! Only the exported symbols are `unsafe` (they take raw pointers, as the C
//! signature does); the comparison itself is safe code over slices, tested
//! natively. It must not compare slices with `==` or `cmp`: those call
//! `memcmp`, which on Wasm is this function.

/// Compares the first `min(a.len(), b.len())` bytes of `a` and `b` as
/// `memcmp` does: negative, zero or positive as `a` sorts before, equal to
/// or after `b` byte-wise (callers pass equal lengths, as C's `n`).
#[cfg(any(all(target_arch = "wasm32", feature = "memcmp"), test))]
pub(crate) fn compare(a: &[u8], b: &[u8]) -> i32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut words_a = a.chunks_exact(8);
    let mut words_b = b.chunks_exact(8);
    for (x, y) in (&mut words_a).zip(&mut words_b) {
        // Big-endian, so that the first differing byte decides.
        let x = u64::from_be_bytes([x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]]);
        let y = u64::from_be_bytes([y[0], y[1], y[2], y[3], y[4], y[5], y[6], y[7]]);
        if x != y {
            return if x < y { -1 } else { 1 };
        }
    }
    for (x, y) in words_a.remainder().iter().zip(words_b.remainder()) {
        if x != y {
            return i32::from(*x) - i32::from(*y);
        }
    }
    0
}

#[cfg(all(target_arch = "wasm32", feature = "memcmp"))]
#[allow(unsafe_code)]
mod symbols {
    /// C `memcmp`.
    ///
    /// # Safety
    ///
    /// `a` and `b` must be valid for reads of `n` bytes, as C requires.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
        if n == 0 {
            // The pointers may be dangling (or null) when nothing is read.
            return 0;
        }
        // SAFETY: the caller guarantees `n` readable bytes at each pointer;
        // `n > 0`, so neither is null.
        let (a, b) = unsafe {
            (
                core::slice::from_raw_parts(a, n),
                core::slice::from_raw_parts(b, n),
            )
        };
        super::compare(a, b)
    }

    /// C `bcmp`: zero when equal (LLVM calls it for `==` on byte slices).
    ///
    /// # Safety
    ///
    /// As [`memcmp`].
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
        // SAFETY: the same contract as `memcmp`.
        unsafe { memcmp(a, b, n) }
    }
}

#[cfg(test)]
mod tests {
    use super::compare;

    fn sign(n: i32) -> i32 {
        n.signum()
    }

    #[test]
    fn agrees_with_slice_ordering_on_every_length_and_position() {
        // Every length up to three words, a difference at every position,
        // in both directions, and equal inputs.
        for len in 0..=24 {
            let base: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            assert_eq!(compare(&base, &base), 0, "equal, length {len}");
            for at in 0..len {
                for delta in [1u8, 0x80] {
                    let mut other = base.clone();
                    other[at] = other[at].wrapping_add(delta);
                    let expected = base.cmp(&other) as i32;
                    assert_eq!(
                        sign(compare(&base, &other)),
                        expected,
                        "length {len}, byte {at}"
                    );
                    assert_eq!(
                        sign(compare(&other, &base)),
                        -expected,
                        "length {len}, byte {at}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_first_difference_decides_not_the_largest() {
        // Differences in one word: byte 1 says "less", byte 6 says "more".
        let a = b"xAyyyyZyy";
        let b = b"xByyyyAyy";
        assert_eq!(sign(compare(a, b)), -1);
        assert_eq!(sign(compare(b, a)), 1);
    }

    #[test]
    fn bytes_compare_unsigned() {
        assert_eq!(sign(compare(&[0xff], &[0x01])), 1);
        assert_eq!(sign(compare(&[0u8, 0, 0, 0, 0, 0, 0, 0xff], &[0u8; 8])), 1);
    }

    #[test]
    fn keys_with_long_shared_prefixes_sort_as_strings_do() {
        let mut keys: Vec<String> = (0..200)
            .rev()
            .map(|i| format!("example.com/note-{i}"))
            .collect();
        let mut by_compare = keys.clone();
        // As `Ord for str` uses memcmp: the common prefix, then the length.
        by_compare.sort_by(|a, b| {
            compare(a.as_bytes(), b.as_bytes())
                .cmp(&0)
                .then(a.len().cmp(&b.len()))
        });
        keys.sort();
        assert_eq!(by_compare, keys);
    }
}
