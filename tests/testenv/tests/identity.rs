//! Client-certificate identities: a kubeconfig laid out like OCM's mounted hub-kubeconfig
//! secret authenticates as the certificate's user and groups; a certificate from another CA is
//! refused.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{SelfSubjectReview, UserInfo};
use kube::api::PostParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use testenv::ClientCertificate;

const HOUR: Duration = Duration::from_secs(3600);

fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("testenv-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

async fn client_from(kubeconfig: &Path) -> Client {
    let kc = Kubeconfig::read_from(kubeconfig).expect("the kubeconfig parses");
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("the kubeconfig makes a client config");
    Client::try_from(config).expect("the client config makes a client")
}

/// Who the apiserver says the client is.
async fn whoami(client: Client) -> Result<UserInfo, kube::Error> {
    let review = Api::<SelfSubjectReview>::all(client)
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await?;
    Ok(review.status.and_then(|s| s.user_info).unwrap_or_default())
}

#[tokio::test]
async fn certificate_kubeconfig_authenticates_as_user_and_groups() {
    let cp = testenv::shared().await;
    let dir = scratch_dir("cert-identity");
    let user = "system:open-cluster-management:cluster1:agent";
    let groups = [
        "system:open-cluster-management:cluster1",
        "system:open-cluster-management:managed-clusters",
    ];
    let cert = cp
        .client_certificate(user, &groups, HOUR)
        .expect("a client certificate");
    let path = cp
        .write_cert_kubeconfig(&dir, &cert)
        .expect("the kubeconfig is written");

    // Laid out like the mounted secret: relative paths, the CA embedded, nothing else left.
    assert_eq!(path, dir.join("kubeconfig"));
    let text = std::fs::read_to_string(&path).expect("the kubeconfig is readable");
    assert!(text.contains("client-certificate: tls.crt"), "{text}");
    assert!(text.contains("client-key: tls.key"), "{text}");
    assert!(text.contains("certificate-authority-data: "), "{text}");
    assert_eq!(
        std::fs::read_to_string(dir.join("tls.crt")).expect("tls.crt"),
        cert.cert_pem
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("tls.key")).expect("tls.key"),
        cert.key_pem
    );
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("the directory is readable")
        .map(|e| {
            e.expect("a directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    assert_eq!(names, ["kubeconfig", "tls.crt", "tls.key"]);
    assert!(
        cp.ca_pem()
            .expect("the serving CA")
            .starts_with("-----BEGIN CERTIFICATE-----")
    );

    let info = whoami(client_from(&path).await)
        .await
        .expect("the certificate authenticates");
    assert_eq!(info.username.as_deref(), Some(user));
    let got = info.groups.unwrap_or_default();
    for group in groups.iter().chain(&["system:authenticated"]) {
        assert!(got.iter().any(|g| g == group), "{group} missing in {got:?}");
    }
    assert_eq!(got.len(), groups.len() + 1, "unexpected groups {got:?}");

    // Rewriting in place (a rotated certificate) works too, with no group at all.
    let rotated = cp
        .client_certificate("rotated", &[], HOUR)
        .expect("a second client certificate");
    cp.write_cert_kubeconfig(&dir, &rotated)
        .expect("the kubeconfig is rewritten");
    let info = whoami(client_from(&path).await)
        .await
        .expect("the rotated certificate authenticates");
    assert_eq!(info.username.as_deref(), Some("rotated"));
    assert_eq!(
        info.groups.unwrap_or_default(),
        ["system:authenticated".to_string()]
    );
    std::fs::remove_dir_all(&dir).expect("the scratch directory is removed");
}

#[tokio::test]
async fn certificate_from_another_ca_is_refused() {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    };
    let cp = testenv::shared().await;
    let dir = scratch_dir("cert-other-ca");

    let mut ca_params = CertificateParams::default();
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "some-other-ca");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let other_ca = Issuer::new(ca_params, KeyPair::generate().expect("a CA key"));
    let leaf_key = KeyPair::generate().expect("a leaf key");
    let mut leaf = CertificateParams::default();
    leaf.distinguished_name.push(DnType::CommonName, "mallory");
    leaf.distinguished_name
        .push(DnType::OrganizationName, "system:masters");
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let forged = ClientCertificate {
        cert_pem: leaf
            .signed_by(&leaf_key, &other_ca)
            .expect("the leaf is signed")
            .pem(),
        key_pem: leaf_key.serialize_pem(),
    };
    let path = cp
        .write_cert_kubeconfig(&dir, &forged)
        .expect("the kubeconfig is written");

    let err = whoami(client_from(&path).await)
        .await
        .expect_err("a certificate from another CA must not authenticate");
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 401),
        "expected 401, got {err:?}"
    );
    std::fs::remove_dir_all(&dir).expect("the scratch directory is removed");
}
