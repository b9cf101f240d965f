//! Scoped tokens on the command line: `delayd token hash` prints the
//! SHA-256 a `--token-file` entry stores, and `serve` reads the file at
//! start ([`read_token_file`], refusing a bad one) and again on SIGHUP
//! ([`reload`], keeping the previous set when the file is bad).

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::path::Path;

use anyhow::Context as _;
use delayd_server::{token_digest, ScopedTokens, TokenFile};

use crate::config::ConfigError;
use crate::UsageError;

#[derive(Debug, clap::Subcommand)]
pub enum TokenCommand {
    /// Print the SHA-256 of a secret (lowercase hex), the `sha256` of its
    /// `[[token]]` table in `--token-file`. The secret is read from stdin
    /// (its first line, without the newline) unless given as an argument,
    /// so it need not land in the shell's history.
    Hash(HashArgs),
}

#[derive(Debug, clap::Args)]
pub struct HashArgs {
    /// The secret; absent or `-`: read from stdin.
    secret: Option<String>,
}

pub fn run(command: TokenCommand) -> anyhow::Result<()> {
    match command {
        TokenCommand::Hash(args) => hash(args),
    }
}

fn hash(args: HashArgs) -> anyhow::Result<()> {
    let secret = match args.secret {
        Some(secret) if secret != "-" => secret,
        _ => read_secret()?,
    };
    if secret.is_empty() {
        return Err(UsageError("the secret is empty".into()).into());
    }
    let digest = hex::encode(token_digest(secret.as_bytes()));
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{digest}").context("writing the digest")?;
    Ok(())
}

/// The first line of stdin, without its line ending.
fn read_secret() -> anyhow::Result<String> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        eprint!("secret (end with Enter): ");
    }
    let mut line = String::new();
    stdin
        .lock()
        .read_line(&mut line)
        .context("reading the secret from stdin")?;
    let secret = line.strip_suffix('\n').unwrap_or(&line);
    Ok(secret.strip_suffix('\r').unwrap_or(secret).to_owned())
}

/// Reads and parses `--token-file`; the error names the file and the line.
pub(crate) fn read_token_file(path: &Path) -> Result<TokenFile, ConfigError> {
    let failed = |reason: String| ConfigError::TokenFile {
        path: path.to_owned(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|error| failed(error.to_string()))?;
    TokenFile::parse(&text).map_err(|error| failed(error.to_string()))
}

/// SIGHUP: the file again. A file that cannot be read or parsed keeps the
/// tokens in use (logged); a good one replaces them all at once.
pub(crate) fn reload(path: &Path, tokens: &ScopedTokens) {
    match read_token_file(path) {
        Ok(file) => {
            let names = file.names().len();
            tokens.replace(file);
            tracing::info!(path = %path.display(), tokens = names, "token file reloaded");
        }
        Err(error) => {
            tracing::error!(%error, "token file not reloaded; the previous tokens stay in use");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_file_names_the_file_and_the_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("tokens.toml");
        let digest = hex::encode(token_digest(b"s"));
        let text = format!(
            "[[token]]\nname = \"w\"\nsha256 = \"{digest}\"\nscopes = [\"consume:q\", \"eat:q\"]\n"
        );
        std::fs::write(&path, text).expect("write");
        let error = read_token_file(&path)
            .expect_err("unknown verb")
            .to_string();
        assert!(
            error.contains(&path.display().to_string()) && error.contains("line 4"),
            "{error}"
        );
        assert!(error.contains("\"eat\""), "{error}");
    }

    #[test]
    fn a_bad_file_on_reload_keeps_the_previous_tokens() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("tokens.toml");
        let digest = hex::encode(token_digest(b"s"));
        let good =
            format!("[[token]]\nname = \"w\"\nsha256 = \"{digest}\"\nscopes = [\"read:*\"]\n");
        std::fs::write(&path, &good).expect("write");
        let tokens = ScopedTokens::new(read_token_file(&path).expect("valid"));
        std::fs::write(&path, "[[token]\n").expect("write");
        reload(&path, &tokens);
        assert_eq!(tokens.names(), ["w"]);
        std::fs::write(&path, good.replace("\"w\"", "\"w2\"")).expect("write");
        reload(&path, &tokens);
        assert_eq!(tokens.names(), ["w2"]);
    }
}
