//! One object store client per bucket, configured only from each cloud's
//! standard variables and files, so no secret is ever on the command line:
//!
//! - S3: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`,
//!   `AWS_REGION`/`AWS_DEFAULT_REGION`, `AWS_ENDPOINT_URL` (MinIO-style
//!   stores), web identity and container credentials; else the shared
//!   credentials file (`AWS_SHARED_CREDENTIALS_FILE`, `~/.aws/credentials`,
//!   profile `AWS_PROFILE`), else the instance's role.
//! - GCS: `GOOGLE_APPLICATION_CREDENTIALS`, gcloud's application default
//!   credentials, else the metadata server; `STORAGE_EMULATOR_HOST` as Google's
//!   client libraries read it.
//! - Azure: `AZURE_STORAGE_ACCOUNT_NAME`/`_KEY`, `AZURE_STORAGE_SAS_KEY`, the
//!   other `AZURE_*` variables, `AZURE_STORAGE_CONNECTION_STRING`, else a
//!   managed identity.

use std::sync::Arc;
use std::time::Duration;

use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::{GcpCredential, GoogleCloudStorageBuilder};
use object_store::{BackoffConfig, ClientOptions, ObjectStore, RetryConfig, StaticCredentialProvider};

use super::url::{RemoteUrl, Scheme};
use super::StorageError;

/// Requests that fail for a transient reason are retried inside the client
/// this often, within this time: a store that is down is told within seconds,
/// not after the client's default three minutes.
const REQUEST_RETRIES: usize = 3;
const REQUEST_RETRY_WINDOW: Duration = Duration::from_secs(20);

pub fn build(url: &RemoteUrl) -> Result<Arc<dyn ObjectStore>, StorageError> {
    // reqwest's TLS takes the process's rustls provider: the one the server's own TLS uses.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let built = match url.scheme() {
        Scheme::S3 => s3(url.bucket(), &env),
        Scheme::Gcs => gcs(url.bucket(), &env),
        Scheme::Azure => azure(url.bucket(), &env),
    };
    built.map_err(|err| StorageError::Store {
        url: url.text().to_string(),
        cause: super::errors::describe(&err),
    })
}

fn retry() -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig::default(),
        max_retries: REQUEST_RETRIES,
        retry_timeout: REQUEST_RETRY_WINDOW,
    }
}

/// Downloads may take minutes; a connection that stops sending fails its read instead.
fn client(endpoint: Option<&str>) -> ClientOptions {
    ClientOptions::new()
        .with_allow_http(endpoint.is_some_and(|e| e.starts_with("http://")))
        .with_timeout_disabled()
        .with_read_timeout(Duration::from_secs(60))
        .with_connect_timeout(Duration::from_secs(5))
}

type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

fn s3(bucket: &str, env: Env) -> object_store::Result<Arc<dyn ObjectStore>> {
    let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket).with_retry(retry());
    let endpoint = env("AWS_ENDPOINT_URL_S3").or_else(|| env("AWS_ENDPOINT_URL"));
    if let Some(endpoint) = &endpoint {
        builder = builder.with_endpoint(endpoint);
    }
    if env("AWS_ACCESS_KEY_ID").is_none() && env("AWS_WEB_IDENTITY_TOKEN_FILE").is_none() {
        if let Some(profile) = shared_profile(env) {
            for (key, value) in profile {
                builder = match key.as_str() {
                    "aws_access_key_id" => builder.with_access_key_id(value),
                    "aws_secret_access_key" => builder.with_secret_access_key(value),
                    "aws_session_token" => builder.with_token(value),
                    _ => builder,
                };
            }
        }
    }
    if env("AWS_REGION").is_none() && env("AWS_DEFAULT_REGION").is_none() {
        if let Some(region) = shared_region(env) {
            builder = builder.with_region(region);
        }
    }
    Ok(Arc::new(
        builder.with_client_options(client(endpoint.as_deref())).build()?,
    ))
}

/// The keys of `AWS_PROFILE`'s section (default `default`) in the shared credentials file.
fn shared_profile(env: Env) -> Option<Vec<(String, String)>> {
    let path = env("AWS_SHARED_CREDENTIALS_FILE").or_else(|| Some(format!("{}/.aws/credentials", env("HOME")?)))?;
    let profile = env("AWS_PROFILE").unwrap_or_else(|| "default".into());
    ini_section(&std::fs::read_to_string(path).ok()?, &profile)
}

/// The region of `AWS_PROFILE` in the shared config file (`[profile name]`, or `[default]`).
fn shared_region(env: Env) -> Option<String> {
    let path = env("AWS_CONFIG_FILE").or_else(|| Some(format!("{}/.aws/config", env("HOME")?)))?;
    let section = match env("AWS_PROFILE") {
        Some(profile) if profile != "default" => format!("profile {profile}"),
        _ => "default".into(),
    };
    let text = std::fs::read_to_string(path).ok()?;
    ini_section(&text, &section)?
        .into_iter()
        .find(|(k, _)| k == "region")
        .map(|(_, v)| v)
}

/// `key = value` lines under `[section]` of an AWS-style INI file.
fn ini_section(text: &str, section: &str) -> Option<Vec<(String, String)>> {
    let mut found = None;
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') || line.starts_with(';') || line.is_empty() {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            if found.is_some() {
                break;
            }
            if name.trim() == section {
                found = Some(Vec::new());
            }
            continue;
        }
        if let (Some(keys), Some((key, value))) = (found.as_mut(), line.split_once('=')) {
            keys.push((key.trim().to_ascii_lowercase(), value.trim().to_string()));
        }
    }
    found
}

fn gcs(bucket: &str, env: Env) -> object_store::Result<Arc<dyn ObjectStore>> {
    let mut builder = GoogleCloudStorageBuilder::from_env()
        .with_bucket_name(bucket)
        .with_retry(retry());
    let emulator = env("STORAGE_EMULATOR_HOST").map(|host| match host.contains("://") {
        true => host.trim_end_matches('/').to_string(),
        false => format!("http://{}", host.trim_end_matches('/')),
    });
    if let Some(base) = &emulator {
        // Google's libraries send no credentials to an emulator.
        let anonymous = GcpCredential { bearer: String::new() };
        builder = builder
            .with_base_url(base)
            .with_credentials(Arc::new(StaticCredentialProvider::new(anonymous)));
    }
    Ok(Arc::new(
        builder.with_client_options(client(emulator.as_deref())).build()?,
    ))
}

fn azure(container: &str, env: Env) -> object_store::Result<Arc<dyn ObjectStore>> {
    let mut builder = MicrosoftAzureBuilder::from_env()
        .with_container_name(container)
        .with_retry(retry());
    let mut endpoint = env("AZURE_STORAGE_ENDPOINT");
    if let Some(connection) = env("AZURE_STORAGE_CONNECTION_STRING") {
        for (key, value) in connection_string(&connection) {
            builder = match key.as_str() {
                "accountname" => builder.with_account(value),
                "accountkey" => builder.with_access_key(value),
                "sharedaccesssignature" => builder.with_config("azure_storage_sas_key".parse()?, value),
                "usedevelopmentstorage" => builder.with_use_emulator(value.eq_ignore_ascii_case("true")),
                "blobendpoint" => {
                    endpoint = Some(value.clone());
                    builder.with_endpoint(value)
                }
                _ => builder,
            };
        }
    }
    let emulator = env("AZURE_STORAGE_USE_EMULATOR").is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let endpoint = endpoint.or_else(|| emulator.then(|| "http://".to_string()));
    Ok(Arc::new(
        builder.with_client_options(client(endpoint.as_deref())).build()?,
    ))
}

/// `Key=value;Key=value` pairs of an Azure connection string, keys lowercased.
fn connection_string(text: &str) -> Vec<(String, String)> {
    text.split(';')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_profiles_and_connection_strings() {
        let credentials =
            "[default]\naws_access_key_id = A\n\n[other]\n# note\nAWS_SECRET_ACCESS_KEY=s=3\n[third]\nx=1";
        assert_eq!(
            ini_section(credentials, "default").unwrap(),
            vec![("aws_access_key_id".into(), "A".into())]
        );
        assert_eq!(
            ini_section(credentials, "other").unwrap(),
            vec![("aws_secret_access_key".into(), "s=3".into())]
        );
        assert!(ini_section(credentials, "missing").is_none());
        let pairs = connection_string("DefaultEndpointsProtocol=http;AccountName=dev;AccountKey=a2V5==;");
        assert_eq!(pairs[1], ("accountname".into(), "dev".into()));
        assert_eq!(pairs[2], ("accountkey".into(), "a2V5==".into()));
    }
}
