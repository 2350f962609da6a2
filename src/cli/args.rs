//! Flags more than one command takes, and the parsers that check a flag's value at
//! parse time, so a bad value is a usage error (exit 2) that names the range.

use std::path::PathBuf;

/// `--config FILE`, shared by every command that reads the pool config.
#[derive(Debug, Clone, clap::Args)]
pub struct ConfigArg {
    /// The pool config (default: $POOLCTL_CONFIG, else ./pool.yaml).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The config's format: `pool` (the default: a file with a top-level `model_list`
    /// is read as LiteLLM's) or `litellm` (a LiteLLM proxy config.yaml, always).
    #[arg(long, value_name = "FORMAT", default_value = "pool", value_parser = read_format)]
    pub config_format: crate::harness::target_config::ConfigFormat,
}

/// `--config-format` of a command that reads a config: pool or litellm.
pub fn read_format(s: &str) -> Result<crate::harness::target_config::ConfigFormat, String> {
    use crate::harness::target_config::ConfigFormat;
    match ConfigFormat::parse(s) {
        Some(f @ (ConfigFormat::Pool | ConfigFormat::Litellm)) => Ok(f),
        Some(ConfigFormat::Portkey) => Err(
            "`portkey` is a format `mock` and `chaos` write (Portkey reads no config file); a config is read as pool or litellm".into(),
        ),
        None => Err(format!(
            "`{s}` is not a config format to read; expected pool or litellm"
        )),
    }
}

/// A count flag (`--jobs`, `--concurrency`): 1 to `MAX`. Zero would run nothing, or wait
/// forever for a permit.
pub fn positive<const MAX: usize>(s: &str) -> Result<usize, String> {
    let n: usize = s
        .parse()
        .map_err(|_| format!("`{s}` is not a whole number"))?;
    if (1..=MAX).contains(&n) {
        Ok(n)
    } else {
        Err(format!("must be between 1 and {MAX}"))
    }
}

/// `--listen ADDR`: an IP address and port (`127.0.0.1:8700`, `[::1]:8700`), or a host
/// name and port (`localhost:8700`), resolved once here to its first IPv4 address (else
/// its first address), so a name that cannot be listened on fails as a usage error.
pub fn listen_addr(s: &str) -> Result<std::net::SocketAddr, String> {
    use std::net::ToSocketAddrs;
    if let Ok(addr) = s.parse() {
        return Ok(addr);
    }
    let hint = "expected HOST:PORT, e.g. 127.0.0.1:8700 or localhost:8700";
    if !s
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok())
    {
        return Err(format!("`{s}` is not an address to listen on: {hint}"));
    }
    let addrs: Vec<std::net::SocketAddr> = s
        .to_socket_addrs()
        .map_err(|e| format!("`{s}` cannot be resolved ({e}): {hint}"))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| format!("`{s}` resolves to no address: {hint}"))
}

/// `--config-format`: pool, litellm or portkey.
pub fn config_format(s: &str) -> Result<crate::harness::target_config::ConfigFormat, String> {
    use crate::harness::target_config::ConfigFormat;
    ConfigFormat::parse(s).ok_or_else(|| {
        format!(
            "`{s}` is not a config format; expected one of: {}",
            ConfigFormat::WORDS.join(", ")
        )
    })
}

/// A duration: `500ms`, `5s`, `2m`, or a bare number of seconds; at most 24 h.
pub fn duration_ms(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, unit) = match t.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => (&t[..i], t[i..].trim()),
        None => (t, "s"),
    };
    let scale = match unit {
        "ms" => 1.0,
        "s" => 1000.0,
        "m" => 60_000.0,
        _ => return Err(format!("`{s}`: expected a duration like 500ms, 5s or 2m")),
    };
    match num.parse::<f64>() {
        Ok(n) if n.is_finite() && n >= 0.0 && n * scale <= 86_400_000.0 => Ok((n * scale) as u64),
        _ => Err(format!(
            "`{s}`: expected a duration from 0 to 24 h, like 500ms, 5s or 2m"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_takes_an_ip_and_port_or_a_host_name_and_port() {
        assert_eq!(
            listen_addr("127.0.0.1:8700").unwrap(),
            "127.0.0.1:8700".parse().unwrap()
        );
        assert_eq!(listen_addr("[::1]:0").unwrap(), "[::1]:0".parse().unwrap());
        let local = listen_addr("localhost:8701").unwrap();
        assert!(local.ip().is_loopback(), "{local}");
        assert_eq!(local.port(), 8701);
        for bad in [
            "notanaddr",
            "localhost",
            ":8700",
            "localhost:99999",
            "127.0.0.1:x",
        ] {
            let e = listen_addr(bad).unwrap_err();
            assert!(e.contains("HOST:PORT"), "{bad}: {e}");
        }
    }
}
