//! What stopped decoding early: the kind of problem, the layer it hit and where in the frame.

use core::fmt;

use crate::LayerKind;

/// Why a header could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The captured bytes end before the header does. Normal for a packet cut by the snap length.
    Truncated,
    /// A field contradicts the packet: an IPv4 IHL below 5, a total length shorter than the
    /// header, a TCP data offset below 5, a header running past the bound an enclosing length
    /// field set, a raw-IP version that is neither 4 nor 6...
    Malformed,
    /// Valid framing that weir does not follow: an unknown link type, GRE routing (RFC 1701),
    /// a GRE or ERSPAN version it does not know.
    Unsupported,
    /// More than [`MAX_LAYERS`](crate::MAX_LAYERS) layers or
    /// [`MAX_TUNNELS`](crate::MAX_TUNNELS) nested tunnels.
    TooDeep,
}

impl ErrorKind {
    /// A lower-case word for the kind (`"truncated"`, `"malformed"`...).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Truncated => "truncated",
            ErrorKind::Malformed => "malformed",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::TooDeep => "too deep",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The result of the typed views' checks: a zero-cost error that only says what kind of problem.
pub type Result<T> = core::result::Result<T, ErrorKind>;

/// What stopped [`decode`](crate::decode) early: the kind of problem, the layer that could not be
/// decoded, and the byte offset in the frame where that layer starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DecodeError {
    /// What was wrong.
    pub kind: ErrorKind,
    /// The layer that could not be decoded (it is not in [`Decoded::layers`](crate::Decoded::layers)).
    pub layer: LayerKind,
    /// Offset of that layer's first byte from the start of the frame.
    pub offset: u32,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} at byte {}",
            self.kind,
            self.layer.name(),
            self.offset
        )
    }
}

impl std::error::Error for DecodeError {}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn display() {
        let e = DecodeError {
            kind: ErrorKind::Truncated,
            layer: LayerKind::Tcp,
            offset: 34,
        };
        assert_eq!(e.to_string(), "truncated TCP header at byte 34");
        assert_eq!(ErrorKind::TooDeep.to_string(), "too deep");
    }
}
