//! Certificates for TLS servers, made with `openssl`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::dir::TempDir;

/// A CA, a server certificate for 127.0.0.1 and a client certificate made
/// by it, and a second CA that signed neither; PEM files in a temp dir.
pub struct Certs {
    /// The directory of the PEM files.
    pub dir: TempDir,
    /// The CA's certificate.
    pub ca_cert: PathBuf,
    /// The server's certificate (for IP 127.0.0.1).
    pub server_cert: PathBuf,
    /// The server's key.
    pub server_key: PathBuf,
    /// The client's certificate.
    pub client_cert: PathBuf,
    /// The client's key.
    pub client_key: PathBuf,
    /// The certificate of a CA that signed neither.
    pub other_ca_cert: PathBuf,
}

impl Certs {
    /// Makes them with `openssl` (P-256 keys, valid for 2 days).
    pub fn generate() -> Certs {
        let dir = TempDir::new("certs");
        let at = |name: &str| dir.path().join(name);
        let certs = Certs {
            ca_cert: at("ca.crt"),
            server_cert: at("server.crt"),
            server_key: at("server.key"),
            client_cert: at("client.crt"),
            client_key: at("client.key"),
            other_ca_cert: at("other-ca.crt"),
            dir,
        };
        for ca in ["ca", "other-ca"] {
            openssl(
                certs.dir.path(),
                &[
                    "req",
                    "-x509",
                    "-newkey",
                    "ec",
                    "-pkeyopt",
                    "ec_paramgen_curve:P-256",
                    "-nodes",
                    "-days",
                    "2",
                    "-subj",
                    &format!("/CN=lock-runtime test {ca}"),
                    "-keyout",
                    &format!("{ca}.key"),
                    "-out",
                    &format!("{ca}.crt"),
                ],
            );
        }
        let server_ext = "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n";
        let client_ext = "extendedKeyUsage=clientAuth\n";
        for (name, cn, ext) in [
            ("server", "127.0.0.1", server_ext),
            ("client", "lock-runtime test client", client_ext),
        ] {
            let ext_file = certs.dir.path().join(format!("{name}.ext"));
            std::fs::write(ext_file, ext).expect("write ext");
            openssl(
                certs.dir.path(),
                &[
                    "req",
                    "-newkey",
                    "ec",
                    "-pkeyopt",
                    "ec_paramgen_curve:P-256",
                    "-nodes",
                    "-subj",
                    &format!("/CN={cn}"),
                    "-keyout",
                    &format!("{name}.key"),
                    "-out",
                    &format!("{name}.csr"),
                ],
            );
            sign(certs.dir.path(), name, &format!("{name}.crt"), true);
        }
        // redis-server runs as this user and reads the key itself.
        certs
    }

    /// The client's key certified again by the CA as an X.509 v1
    /// certificate (no extensions), which rustls refuses; its path.
    pub fn client_v1_cert(&self) -> PathBuf {
        sign(self.dir.path(), "client", "client-v1.crt", false);
        self.dir.path().join("client-v1.crt")
    }
}

/// Has the CA sign `<name>.csr` into `out` (valid for 2 days), with the
/// extensions of `<name>.ext` when `extensions` (an X.509 v3 certificate),
/// else none (v1).
fn sign(dir: &Path, name: &str, out: &str, extensions: bool) {
    let csr = format!("{name}.csr");
    let ext = format!("{name}.ext");
    let mut args = vec![
        "x509", "-req", "-in", &csr, "-CA", "ca.crt", "-CAkey", "ca.key",
    ];
    args.extend(["-CAcreateserial", "-days", "2", "-sha256"]);
    if extensions {
        args.extend(["-extfile", &ext]);
    }
    args.extend(["-out", out]);
    openssl(dir, &args);
}

fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl must be installed (scripts/test.sh installs it)");
    assert!(
        output.status.success(),
        "openssl {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}
