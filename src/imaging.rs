//! Encoded image files (multipart uploads, SageMaker image bodies) turned into
//! the input tensor of a signature: raw bytes, URL-safe base64 text, or
//! decoded, converted and resized pixels.

use base64::Engine;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::signature::{SignatureSpec, TensorSpec};
use crate::status::{Code, HasCode};
use crate::tensor::{DType, Tensor, TensorData};

/// What a string image input takes: the encoded file as it is, or as URL-safe
/// base64 text (Simple TensorFlow Serving's image models run
/// `tf.io.decode_base64` in-graph).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StringEncoding {
    Raw,
    Base64,
}

/// A model's image handling; by default string encodings are read off the
/// graph and numeric inputs get images resized to their height and width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImagePolicy {
    /// Overrides what the graph says string inputs take.
    pub string_encoding: Option<StringEncoding>,
    /// Resize images whose size differs from the input's; otherwise they are refused.
    pub resize: bool,
}

impl Default for ImagePolicy {
    fn default() -> Self {
        ImagePolicy {
            string_encoding: None,
            resize: true,
        }
    }
}

/// One uploaded file.
pub struct ImageFile {
    /// The upload's file name (or form field), for error messages.
    pub name: String,
    /// Shared with the request body it came in, where it is the whole body.
    pub bytes: bytes::Bytes,
}

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The signature cannot take images.
    #[error("{0}")]
    Signature(String),
    /// One file could not be used.
    #[error("image '{file}': {message}")]
    File { file: String, message: String },
}

impl HasCode for ImageError {
    fn code(&self) -> Code {
        Code::InvalidArgument
    }
}

/// How files become the input tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Feed {
    Raw,
    Base64,
    Pixels {
        height: usize,
        width: usize,
        channels: usize,
        dtype: DType,
        resize: bool,
    },
}

/// The input image files go to: `images` or `image` when the signature has
/// several inputs, else its only one.
pub fn image_input(signature: &SignatureSpec) -> Result<&TensorSpec, ImageError> {
    if let [only] = signature.inputs.as_slice() {
        return Ok(only);
    }
    ["images", "image"]
        .iter()
        .find_map(|key| signature.input(key))
        .ok_or_else(|| {
            ImageError::Signature(format!(
                "image uploads need a signature with one input or an input named 'images'; '{}' has {}",
                signature.name,
                signature.input_names()
            ))
        })
}

/// How `input` takes images under `policy`.
pub fn feed_for(signature: &SignatureSpec, input: &TensorSpec, policy: ImagePolicy) -> Result<Feed, ImageError> {
    if input.dtype == DType::String {
        let detected = if signature.base64_inputs.contains(&input.key) {
            StringEncoding::Base64
        } else {
            StringEncoding::Raw
        };
        return Ok(match policy.string_encoding.unwrap_or(detected) {
            StringEncoding::Raw => Feed::Raw,
            StringEncoding::Base64 => Feed::Base64,
        });
    }
    if !matches!(input.dtype, DType::Float | DType::UInt8) {
        return Err(ImageError::Signature(format!(
            "input '{}' is {}; images go to string, float or uint8 inputs",
            input.key, input.dtype
        )));
    }
    match input.shape.as_deref() {
        Some([_, h, w, c]) if *h > 0 && *w > 0 && matches!(*c, 1 | 3 | 4) => Ok(Feed::Pixels {
            height: *h as usize,
            width: *w as usize,
            channels: *c as usize,
            dtype: input.dtype,
            resize: policy.resize,
        }),
        other => Err(ImageError::Signature(format!(
            "input '{}' of shape {} is not an image batch [-1, height, width, 1, 3 or 4]",
            input.key,
            other.map_or("unknown".into(), |s| format!("{s:?}"))
        ))),
    }
}

/// The batch of `files` as one tensor for `feed`; files decode in parallel on
/// the rayon pool this runs on.
pub fn batch_tensor(files: &[ImageFile], feed: Feed) -> Result<Tensor, ImageError> {
    let rows = files.len();
    match feed {
        Feed::Raw => Ok(Tensor::new(
            vec![rows],
            TensorData::String(files.iter().map(|f| f.bytes.to_vec()).collect()),
        )),
        Feed::Base64 => {
            let engine = base64::engine::general_purpose::URL_SAFE;
            Ok(Tensor::new(
                vec![rows],
                TensorData::String(files.iter().map(|f| engine.encode(&f.bytes).into_bytes()).collect()),
            ))
        }
        Feed::Pixels {
            height,
            width,
            channels,
            dtype,
            resize,
        } => {
            // The whole batch decoded, before decoding any of it.
            let element = if dtype == DType::UInt8 { 1 } else { 4 };
            let needed = rows.saturating_mul(height * width * channels * element);
            if needed > MAX_BATCH_BYTES {
                return Err(ImageError::Signature(format!(
                    "{rows} images of {width}x{height}x{channels} need {} MiB decoded, over the {} MiB limit; \
                     send fewer images per request",
                    needed >> 20,
                    MAX_BATCH_BYTES >> 20
                )));
            }
            let decoded: Vec<Vec<u8>> = files
                .par_iter()
                .map(|file| decode_pixels(file, height, width, channels, resize))
                .collect::<Result<_, _>>()?;
            let pixels = decoded.concat();
            let data = if dtype == DType::UInt8 {
                TensorData::UInt8(pixels)
            } else {
                TensorData::Float(pixels.into_iter().map(|v| f32::from(v) / 255.0).collect())
            };
            Ok(Tensor::new(vec![rows, height, width, channels], data))
        }
    }
}

/// [`batch_tensor`] on the rayon pool, so decoding never holds an HTTP worker.
pub async fn batch_tensor_off_thread(files: Vec<ImageFile>, feed: Feed) -> Result<Tensor, ImageError> {
    if !matches!(feed, Feed::Pixels { .. }) {
        return batch_tensor(&files, feed);
    }
    let (sender, receiver) = tokio::sync::oneshot::channel();
    rayon::spawn(move || {
        let _ = sender.send(batch_tensor(&files, feed));
    });
    receiver
        .await
        .unwrap_or_else(|_| Err(ImageError::Signature("image decoding stopped".into())))
}

/// Largest width or height an upload may decode to.
const MAX_SIDE: u32 = 16_384;
/// Most memory the decoded pixels of one request may take.
const MAX_BATCH_BYTES: usize = 1 << 30;
/// Most memory one decode may allocate.
const MAX_DECODED_BYTES: u64 = 512 << 20;

/// The file's pixels, row-major height × width × channels.
fn decode_pixels(
    file: &ImageFile,
    height: usize,
    width: usize,
    channels: usize,
    resize: bool,
) -> Result<Vec<u8>, ImageError> {
    let fail = |message: String| ImageError::File {
        file: file.name.clone(),
        message,
    };
    let mut reader = image::ImageReader::new(std::io::Cursor::new(&file.bytes))
        .with_guessed_format()
        .map_err(|e| fail(format!("cannot read the upload ({e})")))?;
    // A few kilobytes can declare gigapixels: bound what one decode may take.
    let mut limits = image::Limits::default();
    limits.max_image_width = Some(MAX_SIDE);
    limits.max_image_height = Some(MAX_SIDE);
    limits.max_alloc = Some(MAX_DECODED_BYTES);
    reader.limits(limits);
    let image = reader.decode().map_err(|e| match e {
        image::ImageError::Limits(_) => fail(format!(
            "exceeds the decode limits of {MAX_SIDE}x{MAX_SIDE} pixels and {} MiB ({e})",
            MAX_DECODED_BYTES >> 20
        )),
        _ => fail(format!("not a decodable JPEG, PNG, BMP, GIF or WebP image ({e})")),
    })?;
    let (w, h) = (image.width() as usize, image.height() as usize);
    let image = if (w, h) == (width, height) {
        image
    } else if resize {
        image.resize_exact(width as u32, height as u32, image::imageops::FilterType::Triangle)
    } else {
        return Err(fail(format!(
            "is {w}x{h}, the input takes {width}x{height}, and resizing is off for this model (image_resize)"
        )));
    };
    Ok(match channels {
        1 => image.to_luma8().into_raw(),
        3 => image.to_rgb8().into_raw(),
        _ => image.to_rgba8().into_raw(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signature(inputs: Vec<TensorSpec>, base64: &[&str]) -> SignatureSpec {
        SignatureSpec {
            name: "serving_default".into(),
            method_name: String::new(),
            inputs,
            outputs: vec![],
            base64_inputs: base64.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn spec(key: &str, dtype: DType, shape: Vec<i64>) -> TensorSpec {
        TensorSpec {
            key: key.into(),
            tensor_name: format!("{key}:0"),
            dtype,
            shape: Some(shape),
        }
    }

    fn png(width: u32, height: u32) -> Vec<u8> {
        let image = image::RgbImage::from_fn(width, height, |x, y| image::Rgb([x as u8 * 10, y as u8 * 10, 255]));
        let mut out = std::io::Cursor::new(Vec::new());
        image.write_to(&mut out, image::ImageFormat::Png).unwrap();
        out.into_inner()
    }

    #[test]
    fn string_inputs_follow_the_graph_unless_overridden() {
        let sig = signature(vec![spec("images", DType::String, vec![-1])], &["images"]);
        let input = image_input(&sig).unwrap();
        assert_eq!(feed_for(&sig, input, ImagePolicy::default()).unwrap(), Feed::Base64);
        let raw = ImagePolicy {
            string_encoding: Some(StringEncoding::Raw),
            ..ImagePolicy::default()
        };
        assert_eq!(feed_for(&sig, input, raw).unwrap(), Feed::Raw);
        let files = [ImageFile {
            name: "a.png".into(),
            bytes: vec![0xff, 0xfe, 0x01].into(),
        }];
        let tensor = batch_tensor(&files, Feed::Base64).unwrap();
        assert_eq!(tensor.data, TensorData::String(vec![b"__4B".to_vec()]));
    }

    #[test]
    fn pixels_are_converted_resized_and_batched() {
        let sig = signature(vec![spec("x", DType::UInt8, vec![-1, 4, 3, 1])], &[]);
        let feed = feed_for(&sig, image_input(&sig).unwrap(), ImagePolicy::default()).unwrap();
        let files = vec![
            ImageFile {
                name: "small.png".into(),
                bytes: png(3, 4).into(),
            },
            ImageFile {
                name: "big.png".into(),
                bytes: png(6, 8).into(),
            },
        ];
        let tensor = batch_tensor(&files, feed).unwrap();
        assert_eq!(tensor.shape, vec![2, 4, 3, 1]);
        let Feed::Pixels { resize, .. } = feed else { panic!() };
        assert!(resize);
        let strict = Feed::Pixels {
            height: 4,
            width: 3,
            channels: 3,
            dtype: DType::Float,
            resize: false,
        };
        let err = batch_tensor(&files, strict).unwrap_err().to_string();
        assert!(err.contains("'big.png'") && err.contains("6x8"), "{err}");
        let corrupt = [ImageFile {
            name: "notes.txt".into(),
            bytes: b"hello".to_vec().into(),
        }];
        let err = batch_tensor(&corrupt, strict).unwrap_err().to_string();
        assert!(err.starts_with("image 'notes.txt'"), "{err}");
        // A tiny PNG declaring 100000x100000 pixels is refused before any allocation.
        let mut bomb = png(1, 1);
        bomb[16..20].copy_from_slice(&100_000u32.to_be_bytes());
        bomb[20..24].copy_from_slice(&100_000u32.to_be_bytes());
        let mut crc = flate2::Crc::new();
        crc.update(&bomb[12..29]);
        bomb[29..33].copy_from_slice(&crc.sum().to_be_bytes());
        let huge = [ImageFile {
            name: "bomb.png".into(),
            bytes: bomb.into(),
        }];
        let err = batch_tensor(&huge, strict).unwrap_err().to_string();
        assert!(
            err.starts_with("image 'bomb.png'") && err.contains("16384x16384"),
            "{err}"
        );
        // A request whose decoded batch would not fit is refused before decoding.
        let giant = Feed::Pixels {
            height: 16_000,
            width: 16_000,
            channels: 3,
            dtype: DType::Float,
            resize: true,
        };
        let err = batch_tensor(&files, giant).unwrap_err().to_string();
        assert!(err.contains("over the 1024 MiB limit"), "{err}");
    }

    #[test]
    fn signatures_that_cannot_take_images() {
        let two = signature(
            vec![spec("a", DType::Float, vec![-1]), spec("b", DType::Float, vec![-1])],
            &[],
        );
        assert!(image_input(&two).is_err());
        let flat = signature(vec![spec("x", DType::Float, vec![-1, 3])], &[]);
        assert!(feed_for(&flat, &flat.inputs[0], ImagePolicy::default()).is_err());
        let ints = signature(vec![spec("x", DType::Int64, vec![-1, 2, 2, 1])], &[]);
        assert!(feed_for(&ints, &ints.inputs[0], ImagePolicy::default()).is_err());
    }
}
