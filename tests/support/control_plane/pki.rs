//! The plane's certificates and keys: a CA, the apiserver's serving certificate, an admin client
//! certificate in system:masters, and the service-account signing key pair, written as PEM files.

use std::fs;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

pub(super) struct Pki {
    pub(super) ca: PathBuf,
    pub(super) server_cert: PathBuf,
    pub(super) server_key: PathBuf,
    pub(super) admin_cert: PathBuf,
    pub(super) admin_key: PathBuf,
    pub(super) sa_public: PathBuf,
    pub(super) sa_private: PathBuf,
}

pub(super) fn make_pki(dir: &Path) -> Result<Pki, rcgen::Error> {
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, "csi-pv-controller-test-ca");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;

    let server_key = KeyPair::generate()?;
    let mut server = CertificateParams::new(vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "kubernetes.default.svc".to_string(),
        // The `kubernetes` Service's ClusterIP, which pods' in-cluster configuration dials.
        super::KUBERNETES_SERVICE_IP.to_string(),
    ])?;
    server.distinguished_name.push(DnType::CommonName, "kube-apiserver");
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_cert = server.signed_by(&server_key, &ca)?;

    let admin_key = KeyPair::generate()?;
    let mut admin = CertificateParams::new(Vec::<String>::new())?;
    admin.distinguished_name.push(DnType::CommonName, "admin");
    admin.distinguished_name.push(DnType::OrganizationName, "system:masters");
    admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let admin_cert = admin.signed_by(&admin_key, &ca)?;

    let sa_key = KeyPair::generate()?;

    let write = |name: &str, content: String| {
        let path = dir.join(name);
        fs::write(&path, content).map(|_| path)
    };
    let io = |e: std::io::Error| rcgen::Error::PemError(e.to_string());
    Ok(Pki {
        ca: write("ca.crt", ca.pem()).map_err(io)?,
        server_cert: write("apiserver.crt", server_cert.pem()).map_err(io)?,
        server_key: write("apiserver.key", server_key.serialize_pem()).map_err(io)?,
        admin_cert: write("admin.crt", admin_cert.pem()).map_err(io)?,
        admin_key: write("admin.key", admin_key.serialize_pem()).map_err(io)?,
        sa_public: write("sa.pub", sa_key.public_key_pem()).map_err(io)?,
        sa_private: write("sa.key", sa_key.serialize_pem()).map_err(io)?,
    })
}
