//! Media in tool results: which images a provider can take, and a note for those it cannot.
//!
//! A provider refuses a whole request (a 400, which fails the run) over one bad image in a
//! tool result. So every output a [`ToolSet`](super::ToolSet) returns — from native tools,
//! Lua tools and tool sources alike — goes through [`screen`] first: an image the provider
//! cannot take is dropped, and a text note in its place tells the model what happened.
//!
//! An inline (base64) image is kept when its data is valid base64, its bytes start like a
//! PNG, JPEG, GIF or WebP file, and it decodes to at most [`MediaPolicy::max_image_bytes`]
//! (5 MB by default, Anthropic's limit). A declared media type that is merely spelled
//! differently (`image/JPG`, `image/jpg`) or that disagrees with the bytes is corrected to
//! what the bytes are. URL images are kept as they are: the provider fetches them.
//!
//! ```
//! use rebound_core::{MediaSource, ToolOutput, ToolResultPart};
//! use rebound_effects::tools::media::{screen, MediaPolicy};
//!
//! let tiff = ToolResultPart::Image {
//!     source: MediaSource::Base64 { media_type: "image/tiff".into(), data: "SUkqAA==".into() },
//! };
//! let output = screen(ToolOutput { parts: vec![tiff] }, &MediaPolicy::default());
//! assert_eq!(
//!     output.parts,
//!     [ToolResultPart::text(
//!         "[image dropped: its bytes are not a PNG, JPEG, GIF or WebP image (declared as \
//!          `image/tiff`); the model can only be shown those]"
//!     )]
//! );
//! ```

use super::schema::bounded;
use rebound_core::{MediaSource, ToolOutput, ToolResultPart};

/// The default cap on one image's decoded size: 5 MB, Anthropic's limit per image.
pub const DEFAULT_MAX_IMAGE_BYTES: usize = 5 * 1024 * 1024;

/// What [`screen`] lets through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct MediaPolicy {
    /// An inline image that decodes to more bytes than this is dropped.
    pub max_image_bytes: usize,
}

impl Default for MediaPolicy {
    fn default() -> Self {
        MediaPolicy {
            max_image_bytes: DEFAULT_MAX_IMAGE_BYTES,
        }
    }
}

impl MediaPolicy {
    /// Sets [`MediaPolicy::max_image_bytes`].
    #[must_use]
    pub fn with_max_image_bytes(mut self, max: usize) -> Self {
        self.max_image_bytes = max;
        self
    }
}

/// `output` with every image part checked: kept (its media type corrected if needed), or
/// replaced by a text note saying why it was dropped.
#[must_use]
pub fn screen(mut output: ToolOutput, policy: &MediaPolicy) -> ToolOutput {
    for part in &mut output.parts {
        let ToolResultPart::Image { source } = part else {
            continue;
        };
        if let Err(why) = check_image(source, policy) {
            *part = ToolResultPart::text(format!("[image dropped: {why}]"));
        }
    }
    output
}

/// Checks one image, correcting its media type (and removing whitespace from its data)
/// where that makes it acceptable; `Err` says, for the model, why it cannot be shown.
pub fn check_image(source: &mut MediaSource, policy: &MediaPolicy) -> Result<(), String> {
    let MediaSource::Base64 { media_type, data } = source else {
        return Ok(());
    };
    if data.bytes().any(|b| b.is_ascii_whitespace()) {
        data.retain(|c| !c.is_ascii_whitespace());
    }
    let declared = bounded(media_type, 60);
    if data.is_empty() {
        return Err(format!("it has no data (declared as `{declared}`)"));
    }
    let Some(size) = base64_len(data) else {
        return Err(format!(
            "its data is not valid base64 (declared as `{declared}`)"
        ));
    };
    if size > policy.max_image_bytes {
        return Err(format!(
            "it is {} (declared as `{declared}`), over the {} limit for one image",
            megabytes(size),
            megabytes(policy.max_image_bytes)
        ));
    }
    let head = decode_head(data);
    let Some(actual) = sniff(&head) else {
        return Err(format!(
            "its bytes are not a PNG, JPEG, GIF or WebP image (declared as `{declared}`); \
             the model can only be shown those"
        ));
    };
    if media_type != actual {
        *media_type = actual.to_owned();
    }
    Ok(())
}

/// `5 MB`, `6.2 MB`, `512 KB`, `70 bytes`.
fn megabytes(bytes: usize) -> String {
    const MB: f64 = 1024.0 * 1024.0;
    if bytes >= 1024 * 1024 {
        let mb = bytes as f64 / MB;
        if (mb - mb.round()).abs() < 0.05 {
            format!("{} MB", mb.round())
        } else {
            format!("{mb:.1} MB")
        }
    } else if bytes >= 1024 {
        format!("{} KB", bytes.div_ceil(1024))
    } else {
        format!("{bytes} bytes")
    }
}

/// The decoded length of standard, padded base64, or `None` if it is not that.
fn base64_len(data: &str) -> Option<usize> {
    let bytes = data.as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    let padding = bytes.iter().rev().take_while(|&&b| b == b'=').count();
    if padding > 2 {
        return None;
    }
    let body = &bytes[..bytes.len() - padding];
    if !body.iter().all(|&b| sextet(b).is_some()) {
        return None;
    }
    Some(bytes.len() / 4 * 3 - padding)
}

fn sextet(b: u8) -> Option<u8> {
    match b {
        b'A'..=b'Z' => Some(b - b'A'),
        b'a'..=b'z' => Some(b - b'a' + 26),
        b'0'..=b'9' => Some(b - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    }
}

/// The first (up to) 12 bytes of valid base64 `data`.
fn decode_head(data: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(12);
    for chunk in data.as_bytes().chunks(4).take(4) {
        let values: Vec<u8> = chunk.iter().filter_map(|&b| sextet(b)).collect();
        let n = values.len();
        let word = values
            .iter()
            .fold(0u32, |acc, &v| (acc << 6) | u32::from(v))
            << (6 * (4 - n));
        let bytes = word.to_be_bytes();
        out.extend_from_slice(&bytes[1..n.saturating_sub(1) + 1]);
    }
    out
}

/// The media type the first bytes of an image say it is.
fn sniff(head: &[u8]) -> Option<&'static str> {
    if head.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if head.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some("image/jpeg")
    } else if head.starts_with(b"GIF87a") || head.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if head.len() >= 12 && head.starts_with(b"RIFF") && &head[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PIXEL: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";

    fn image(media_type: &str, data: &str) -> MediaSource {
        MediaSource::Base64 {
            media_type: media_type.into(),
            data: data.into(),
        }
    }

    #[test]
    fn a_valid_png_is_kept() {
        let mut source = image("image/png", PIXEL);
        assert_eq!(check_image(&mut source, &MediaPolicy::default()), Ok(()));
        assert_eq!(source, image("image/png", PIXEL));
    }

    #[test]
    fn a_misdeclared_type_is_corrected_from_the_bytes() {
        let mut source = image("image/JPG", PIXEL);
        assert_eq!(check_image(&mut source, &MediaPolicy::default()), Ok(()));
        assert_eq!(source.media_type(), Some("image/png"));
    }

    #[test]
    fn base64_with_line_breaks_is_joined() {
        let wrapped = format!("{}\n{}", &PIXEL[..40], &PIXEL[40..]);
        let mut source = image("image/png", &wrapped);
        assert_eq!(check_image(&mut source, &MediaPolicy::default()), Ok(()));
        assert_eq!(source, image("image/png", PIXEL));
    }

    #[test]
    fn each_kind_of_bad_image_says_why() {
        let policy = MediaPolicy::default().with_max_image_bytes(50);
        let check = |media_type: &str, data: &str| {
            check_image(&mut image(media_type, data), &policy).unwrap_err()
        };
        assert!(check("image/png", "").contains("no data"));
        assert!(check("image/png", "not base64!").contains("not valid base64"));
        assert!(check("image/png", "QUJD=").contains("not valid base64"));
        assert_eq!(
            check("image/png", PIXEL),
            "it is 70 bytes (declared as `image/png`), over the 50 bytes limit for one image"
        );
        assert!(check("application/pdf", "JVBERi0xLjcK").contains("not a PNG, JPEG, GIF or WebP"));
    }

    #[test]
    fn sizes_are_measured_decoded() {
        assert_eq!(base64_len("QUJD"), Some(3));
        assert_eq!(base64_len("QUI="), Some(2));
        assert_eq!(base64_len("QQ=="), Some(1));
        assert_eq!(base64_len("Q==="), None);
        assert_eq!(megabytes(6 * 1024 * 1024 + 300 * 1024), "6.3 MB");
        assert_eq!(megabytes(5 * 1024 * 1024), "5 MB");
    }

    #[test]
    fn the_head_decodes_to_the_magic_bytes() {
        assert_eq!(&decode_head(PIXEL)[..8], b"\x89PNG\r\n\x1a\n");
        // "GIF89a" + padding.
        assert_eq!(decode_head("R0lGODlh"), b"GIF89a");
        assert_eq!(decode_head("QQ=="), b"A");
    }
}
