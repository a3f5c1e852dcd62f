//! One module per subcommand, plus the input loop they share.

pub mod decode;
pub mod info;
pub mod input;
pub mod read;
