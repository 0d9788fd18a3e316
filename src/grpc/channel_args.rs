//! `--grpc_channel_arguments`: TF Serving's `key=value,...` list of gRPC core
//! arguments, mapped onto what the HTTP/2 server here can do.

use std::time::Duration;

/// The arguments that change this server; gRPC core ignores arguments it has
/// no use for (logging them), and so do we.
#[derive(Debug, Default, PartialEq)]
pub struct ChannelArguments {
    pub max_connection_age: Option<Duration>,
    pub max_connection_age_grace: Option<Duration>,
    pub keepalive_time: Option<Duration>,
    pub keepalive_timeout: Option<Duration>,
    pub max_connection_idle: Option<Duration>,
    pub handshake_timeout: Option<Duration>,
    pub max_concurrent_streams: Option<u32>,
    pub max_receive_message_length: Option<usize>,
    pub max_send_message_length: Option<usize>,
    /// Recognised by gRPC but with no effect here, or unknown: named in the log.
    pub ignored: Vec<String>,
}

impl ChannelArguments {
    /// Parses the flag's value; an element without `=` or a number that does
    /// not parse is refused with the element named (TF Serving crashes on the first).
    pub fn parse(text: &str) -> Result<ChannelArguments, String> {
        let mut args = ChannelArguments::default();
        for element in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let Some((key, value)) = element.split_once('=') else {
                return Err(format!("grpc_channel_arguments: {element:?} is not key=value"));
            };
            let number = || {
                value
                    .trim()
                    .parse::<u64>()
                    .map_err(|_| format!("grpc_channel_arguments: {key}={value:?} is not a non-negative integer"))
            };
            let millis = || number().map(|ms| Some(Duration::from_millis(ms)));
            match key.trim() {
                "grpc.max_connection_age_ms" => args.max_connection_age = millis()?,
                "grpc.max_connection_age_grace_ms" => args.max_connection_age_grace = millis()?,
                "grpc.keepalive_time_ms" => args.keepalive_time = millis()?,
                "grpc.keepalive_timeout_ms" => args.keepalive_timeout = millis()?,
                "grpc.max_connection_idle_ms" => args.max_connection_idle = millis()?,
                "grpc.server_handshake_timeout_ms" => args.handshake_timeout = millis()?,
                "grpc.max_concurrent_streams" => {
                    args.max_concurrent_streams = Some(u32::try_from(number()?).unwrap_or(u32::MAX))
                }
                "grpc.max_receive_message_length" => {
                    args.max_receive_message_length = Some(usize::try_from(number()?).unwrap_or(usize::MAX))
                }
                "grpc.max_send_message_length" => {
                    args.max_send_message_length = Some(usize::try_from(number()?).unwrap_or(usize::MAX))
                }
                _ => args.ignored.push(element.to_string()),
            }
        }
        Ok(args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tf_serving_test_arguments_parse_and_unknown_ones_are_ignored() {
        let args =
            ChannelArguments::parse("grpc.max_connection_age_ms=2000,grpc.lb_policy_name=grpclb,grpc.so_reuseaddr=1")
                .unwrap();
        assert_eq!(args.max_connection_age, Some(Duration::from_millis(2000)));
        assert_eq!(args.ignored, ["grpc.lb_policy_name=grpclb", "grpc.so_reuseaddr=1"]);
        assert_eq!(ChannelArguments::parse("").unwrap(), ChannelArguments::default());
    }

    #[test]
    fn malformed_elements_are_named() {
        let error = ChannelArguments::parse("grpc.keepalive_time_ms").unwrap_err();
        assert!(error.contains("\"grpc.keepalive_time_ms\" is not key=value"), "{error}");
        let error = ChannelArguments::parse("grpc.keepalive_time_ms=soon").unwrap_err();
        assert!(error.contains("grpc.keepalive_time_ms=\"soon\""), "{error}");
        let args = ChannelArguments::parse("grpc.max_receive_message_length=1024").unwrap();
        assert_eq!(args.max_receive_message_length, Some(1024));
    }
}
