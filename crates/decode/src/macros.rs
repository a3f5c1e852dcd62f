//! The boilerplate every typed view shares, as one macro.

/// Declares a typed view `$name<T: AsRef<[u8]>>` over a byte buffer, with `new_unchecked`,
/// `new_checked` (which calls the view's own `check_len`), `into_inner` and `as_bytes`.
macro_rules! view {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> core::fmt::Debug for $name<T> {
            /// The view's name, the first bytes (at most 16) and the length of its buffer, not
            /// the whole buffer, which may hold a jumbo frame.
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                let b = self.buffer.as_ref();
                f.debug_struct(stringify!($name))
                    .field("head", &&b[..b.len().min(16)])
                    .field("len", &b.len())
                    .finish()
            }
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Wraps a buffer without checking it: getters may panic when it is too short.
            #[inline]
            pub const fn new_unchecked(buffer: T) -> Self {
                Self { buffer }
            }

            /// Wraps a buffer after `check_len` passed: no getter panics afterwards.
            #[inline]
            pub fn new_checked(buffer: T) -> $crate::Result<Self> {
                let v = Self::new_unchecked(buffer);
                v.check_len()?;
                Ok(v)
            }

            /// Gives back the wrapped buffer.
            #[inline]
            pub fn into_inner(self) -> T {
                self.buffer
            }

            /// The wrapped bytes, from the first byte of the header on.
            #[inline]
            pub fn as_bytes(&self) -> &[u8] {
                self.buffer.as_ref()
            }
        }
    };
}
