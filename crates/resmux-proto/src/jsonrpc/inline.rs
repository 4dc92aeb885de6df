//! Short bytes kept in place: a request id, a cached answer's `ttlMs` head. Made per request,
//! they would otherwise cost an allocation each (and, shared, a reference count per clone).

/// Up to `N` bytes (at most 255), held in place.
#[derive(Clone, Copy)]
pub struct Inline<const N: usize> {
    len: u8,
    bytes: [u8; N],
}

impl<const N: usize> Inline<N> {
    /// `parts` back to back, when they fit.
    #[inline]
    pub(crate) fn of(parts: &[&[u8]]) -> Option<Self> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > N || len > usize::from(u8::MAX) {
            return None;
        }
        let mut bytes = [0; N];
        let mut at = 0;
        for part in parts {
            bytes[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        Some(Self { len: len as u8, bytes })
    }

    #[inline]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl<const N: usize> Default for Inline<N> {
    fn default() -> Self {
        Self { len: 0, bytes: [0; N] }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_that_fit_are_kept_back_to_back() {
        let kept = Inline::<8>::of(&[b"ab", b"", b"cdefgh"]).expect("eight bytes fit");
        assert_eq!(kept.as_bytes(), b"abcdefgh");
        assert!(Inline::<8>::of(&[b"abcdefgh", b"i"]).is_none(), "nine do not");
        assert!(Inline::<300>::of(&[&[0; 256]]).is_none(), "past what a length byte counts");
        assert_eq!(Inline::<4>::default().as_bytes(), b"");
    }
}
