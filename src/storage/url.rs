//! Object storage URLs as base paths: `s3://bucket/prefix`,
//! `gs://bucket/prefix`, `az://container/prefix`.

use std::path::Path;

use super::StorageError;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scheme {
    S3,
    Gcs,
    Azure,
}

impl Scheme {
    pub fn name(self) -> &'static str {
        match self {
            Scheme::S3 => "s3",
            Scheme::Gcs => "gs",
            Scheme::Azure => "az",
        }
    }
}

/// A parsed remote base path; the prefix has no leading or trailing slash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteUrl {
    scheme: Scheme,
    bucket: String,
    prefix: String,
    text: String,
}

impl RemoteUrl {
    /// `None` for a local path; an error for a URL tfserve cannot read.
    pub fn of(path: &Path) -> Option<Result<RemoteUrl, StorageError>> {
        let text = path.to_str()?;
        let (scheme, rest) = text.split_once("://")?;
        // A local folder may be named `a://b` only below another folder.
        if scheme.is_empty() || !scheme.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'+') {
            return None;
        }
        Some(RemoteUrl::parse(text, scheme, rest))
    }

    fn parse(text: &str, scheme: &str, rest: &str) -> Result<RemoteUrl, StorageError> {
        let bad = |reason: &str| StorageError::BadUrl {
            url: text.to_string(),
            reason: reason.to_string(),
        };
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "s3" => Scheme::S3,
            "gs" => Scheme::Gcs,
            "az" => Scheme::Azure,
            _ => {
                return Err(bad(
                    "unsupported scheme: base paths are local folders, s3://, gs:// or az:// URLs",
                ))
            }
        };
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(bad("no bucket (or container) name"));
        }
        if bucket.contains(['?', '#', '@']) {
            return Err(bad("the bucket name has characters no store allows ('?', '#' or '@')"));
        }
        let parts: Vec<&str> = prefix.split('/').filter(|p| !p.is_empty()).collect();
        if parts.iter().any(|p| *p == "." || *p == "..") {
            return Err(bad("the prefix has a '.' or '..' segment"));
        }
        Ok(RemoteUrl {
            scheme,
            bucket: bucket.to_string(),
            prefix: parts.join("/"),
            text: text.trim_end_matches('/').to_string(),
        })
    }

    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The URL as written (without a trailing slash), for messages.
    pub fn text(&self) -> &str {
        &self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Option<Result<RemoteUrl, StorageError>> {
        RemoteUrl::of(Path::new(text))
    }

    #[test]
    fn urls_and_local_paths() {
        assert!(parse("/models/m").is_none());
        assert!(parse("models/m").is_none());
        let url = parse("s3://bucket/a//b/").unwrap().unwrap();
        assert_eq!(
            (url.scheme(), url.bucket(), url.prefix()),
            (Scheme::S3, "bucket", "a/b")
        );
        assert_eq!(url.text(), "s3://bucket/a//b");
        let url = parse("gs://b").unwrap().unwrap();
        assert_eq!((url.scheme(), url.prefix()), (Scheme::Gcs, ""));
        assert_eq!(parse("az://c/p").unwrap().unwrap().scheme(), Scheme::Azure);
        let refused = |text: &str| parse(text).unwrap().unwrap_err().to_string();
        assert!(refused("hdfs://nn/models").contains("unsupported scheme"));
        assert!(refused("s3:///prefix").contains("no bucket"));
        assert!(refused("s3://b/../etc").contains("'..'"));
    }
}
