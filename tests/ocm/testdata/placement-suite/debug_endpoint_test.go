// Ours, added to upstream's placement integration package by tests/ocm/placement-suite.sh
// (go test -overlay): upstream's DebugService specs (ocm main, test/integration/placement)
// call upstream's Go handler in-process with the user put into the request's context; these
// call our placement-scheduler's debug endpoint the way a user does, over HTTPS with a
// ServiceAccount token, against the suite's apiserver and real RBAC. The POSTed Placement is
// built with upstream's own test helper and marshalled by encoding/json, so its empty slices
// are JSON nulls, as every Go client sends them.
package placement

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"

	clusterapiv1beta1 "open-cluster-management.io/api/cluster/v1beta1"

	controllers "open-cluster-management.io/ocm/pkg/placement/controllers"
	testinghelpers "open-cluster-management.io/ocm/pkg/placement/helpers/testing"
)

// debugAnswer is the part of the endpoint's answer these specs read (our field names are
// upstream main's: filteredPipelineResults).
type debugAnswer struct {
	Placement     *clusterapiv1beta1.Placement `json:"placement"`
	FilterResults []struct {
		Name             string   `json:"name"`
		FilteredClusters []string `json:"filteredClusters"`
	} `json:"filteredPipelineResults"`
	PrioritizeResults []json.RawMessage `json:"prioritizeResults"`
	Error             string            `json:"error"`
}

var _ = ginkgo.Describe("DebugService against placement-scheduler's HTTPS endpoint", func() {
	var namespace, placementName, clusterSetName, saName string
	var base string
	var client *http.Client
	var cancel context.CancelFunc
	var exited <-chan struct{}

	ginkgo.BeforeEach(func() {
		suffix := utilrand.String(5)
		namespace = fmt.Sprintf("ns-%s", suffix)
		placementName = fmt.Sprintf("placement-%s", suffix)
		clusterSetName = fmt.Sprintf("clusterset-%s", suffix)
		saName = fmt.Sprintf("debug-user-%s", suffix)
		_, err := kubeClient.CoreV1().Namespaces().Create(context.Background(),
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
		gomega.Expect(err).ToNot(gomega.HaveOccurred())
		_, err = kubeClient.CoreV1().ServiceAccounts(namespace).Create(context.Background(),
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: saName}}, metav1.CreateOptions{})
		gomega.Expect(err).ToNot(gomega.HaveOccurred())

		ginkgo.By("Start placement-scheduler with its debug endpoint on HTTPS")
		dir := ginkgo.GinkgoT().TempDir()
		caPool, certFile, keyFile := writeServingCert(dir)
		port := freePort()
		var ctx context.Context
		ctx, cancel = context.WithCancel(context.Background())
		exited, err = controllers.StartPlacementScheduler(ctx, restConfig,
			"--debug-bind-address", fmt.Sprintf("127.0.0.1:%d", port),
			"--tls-cert-file", certFile, "--tls-key-file", keyFile)
		gomega.Expect(err).ToNot(gomega.HaveOccurred())
		base = fmt.Sprintf("https://127.0.0.1:%d/debug/placements/", port)
		client = &http.Client{
			Timeout:   10 * time.Second,
			Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: caPool}},
		}
		// Serving once a request without a token gets its 401.
		gomega.Eventually(func() int {
			resp, err := client.Get(base + "x/y")
			if err != nil {
				return 0
			}
			_ = resp.Body.Close()
			return resp.StatusCode
		}, eventuallyTimeout, eventuallyInterval).Should(gomega.Equal(http.StatusUnauthorized))
	})

	ginkgo.AfterEach(func() {
		cancel()
		gomega.Eventually(exited, eventuallyTimeout, eventuallyInterval).Should(gomega.BeClosed())
		err := kubeClient.CoreV1().Namespaces().Delete(context.Background(), namespace, metav1.DeleteOptions{})
		gomega.Expect(err).ToNot(gomega.HaveOccurred())
		assertCleanupClusters()
	})

	// grant binds a Role allowing verbs on placements in the namespace to the ServiceAccount.
	grant := func(verbs ...string) {
		name := saName + "-" + verbs[0]
		_, err := kubeClient.RbacV1().Roles(namespace).Create(context.Background(), &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Rules: []rbacv1.PolicyRule{{
				APIGroups: []string{"cluster.open-cluster-management.io"},
				Resources: []string{"placements"},
				Verbs:     verbs,
			}},
		}, metav1.CreateOptions{})
		gomega.Expect(err).ToNot(gomega.HaveOccurred())
		_, err = kubeClient.RbacV1().RoleBindings(namespace).Create(context.Background(), &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: saName, Namespace: namespace}},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		}, metav1.CreateOptions{})
		gomega.Expect(err).ToNot(gomega.HaveOccurred())
	}

	// token asks the apiserver for a token of the ServiceAccount (TokenRequest).
	token := func() string {
		seconds := int64(600)
		tr, err := kubeClient.CoreV1().ServiceAccounts(namespace).CreateToken(context.Background(), saName,
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds}},
			metav1.CreateOptions{})
		gomega.Expect(err).ToNot(gomega.HaveOccurred())
		return tr.Status.Token
	}

	// call sends the request with the bearer token (none when empty) and decodes the answer.
	call := func(method, url, bearer string, body []byte) (int, debugAnswer) {
		req, err := http.NewRequest(method, url, bytes.NewReader(body))
		gomega.Expect(err).ToNot(gomega.HaveOccurred())
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := client.Do(req)
		gomega.Expect(err).ToNot(gomega.HaveOccurred())
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		gomega.Expect(err).ToNot(gomega.HaveOccurred())
		var answer debugAnswer
		gomega.Expect(json.Unmarshal(raw, &answer)).To(gomega.Succeed(), "answer %d: %s", resp.StatusCode, raw)
		return resp.StatusCode, answer
	}

	storedPlacement := func() {
		assertBindingClusterSet(clusterSetName, namespace)
		assertCreatingClusters(clusterSetName, 2)
		assertCreatingPlacement(testinghelpers.NewPlacement(namespace, placementName).
			WithClusterSets(clusterSetName).Build())
	}

	ginkgo.It("Should answer a GET with a token whose ServiceAccount may get placements", func() {
		storedPlacement()
		grant("get")
		status, answer := call("GET", base+namespace+"/"+placementName, token(), nil)
		gomega.Expect(answer.Error).To(gomega.BeEmpty())
		gomega.Expect(status).To(gomega.Equal(http.StatusOK))
		gomega.Expect(answer.Placement).ToNot(gomega.BeNil())
		gomega.Expect(answer.Placement.Name).To(gomega.Equal(placementName))
		gomega.Expect(answer.FilterResults).ToNot(gomega.BeEmpty())
		gomega.Expect(answer.FilterResults[len(answer.FilterResults)-1].FilteredClusters).To(gomega.HaveLen(2))
	})

	ginkgo.It("Should refuse a GET when the ServiceAccount has no permission on placements", func() {
		storedPlacement()
		status, answer := call("GET", base+namespace+"/"+placementName, token(), nil)
		gomega.Expect(status).To(gomega.Equal(http.StatusForbidden))
		gomega.Expect(answer.Error).To(gomega.ContainSubstring("does not have permission to get placements"))
	})

	// OCM 1.2 and 1.3 check create for a GET; upstream main checks get, as we do.
	ginkgo.It("Should refuse a GET when the ServiceAccount may only create placements", func() {
		storedPlacement()
		grant("create")
		status, answer := call("GET", base+namespace+"/"+placementName, token(), nil)
		gomega.Expect(status).To(gomega.Equal(http.StatusForbidden))
		gomega.Expect(answer.Error).To(gomega.ContainSubstring("does not have permission to get placements"))
	})

	ginkgo.It("Should answer a POST of a Placement a Go client marshalled, nulls and all", func() {
		assertBindingClusterSet(clusterSetName, namespace)
		assertCreatingClusters(clusterSetName, 3)
		grant("create")
		placement := testinghelpers.NewPlacement(namespace, placementName).
			WithClusterSets(clusterSetName).WithNOC(2).Build()
		body, err := json.Marshal(placement)
		gomega.Expect(err).ToNot(gomega.HaveOccurred())
		// What makes this spec: Go writes empty slices as null.
		gomega.Expect(string(body)).To(gomega.ContainSubstring(`"decisionGroups":null`))
		gomega.Expect(string(body)).To(gomega.ContainSubstring(`"conditions":null`))
		status, answer := call("POST", base, token(), body)
		gomega.Expect(answer.Error).To(gomega.BeEmpty())
		gomega.Expect(status).To(gomega.Equal(http.StatusOK))
		gomega.Expect(answer.Placement).ToNot(gomega.BeNil())
		gomega.Expect(answer.Placement.Name).To(gomega.Equal(placementName))
		gomega.Expect(answer.Placement.Namespace).To(gomega.Equal(namespace))
		gomega.Expect(answer.FilterResults).ToNot(gomega.BeEmpty())
		gomega.Expect(answer.FilterResults[len(answer.FilterResults)-1].FilteredClusters).To(gomega.HaveLen(3))
		gomega.Expect(answer.PrioritizeResults).ToNot(gomega.BeEmpty())
		// Nothing was written: the what-if Placement does not exist.
		_, err = clusterClient.ClusterV1beta1().Placements(namespace).Get(context.Background(), placementName, metav1.GetOptions{})
		gomega.Expect(err).To(gomega.HaveOccurred())
	})

	ginkgo.It("Should refuse a POST when the ServiceAccount may only get placements", func() {
		assertBindingClusterSet(clusterSetName, namespace)
		grant("get")
		body, err := json.Marshal(testinghelpers.NewPlacement(namespace, placementName).Build())
		gomega.Expect(err).ToNot(gomega.HaveOccurred())
		status, answer := call("POST", base, token(), body)
		gomega.Expect(status).To(gomega.Equal(http.StatusForbidden))
		gomega.Expect(answer.Error).To(gomega.ContainSubstring("does not have permission to create placements"))
	})

	ginkgo.It("Should refuse a request without a token, or with one the apiserver does not accept", func() {
		storedPlacement()
		grant("get")
		status, answer := call("GET", base+namespace+"/"+placementName, "", nil)
		gomega.Expect(status).To(gomega.Equal(http.StatusUnauthorized))
		gomega.Expect(answer.Error).ToNot(gomega.BeEmpty())
		status, _ = call("GET", base+namespace+"/"+placementName, token()+"x", nil)
		gomega.Expect(status).To(gomega.Equal(http.StatusUnauthorized))
	})
})

// writeServingCert writes a CA and a serving certificate for 127.0.0.1 signed by it; it
// returns the pool that trusts the CA and the certificate and key files.
func writeServingCert(dir string) (*x509.CertPool, string, string) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	gomega.Expect(err).ToNot(gomega.HaveOccurred())
	now := time.Now()
	caTemplate := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "placement-suite-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	gomega.Expect(err).ToNot(gomega.HaveOccurred())
	ca, err := x509.ParseCertificate(caDER)
	gomega.Expect(err).ToNot(gomega.HaveOccurred())
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	gomega.Expect(err).ToNot(gomega.HaveOccurred())
	leafDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "placement-debug"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca, &key.PublicKey, caKey)
	gomega.Expect(err).ToNot(gomega.HaveOccurred())
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	gomega.Expect(err).ToNot(gomega.HaveOccurred())
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	chain := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})...)
	gomega.Expect(os.WriteFile(certFile, chain, 0o600)).To(gomega.Succeed())
	gomega.Expect(os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600)).To(gomega.Succeed())
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return pool, certFile, keyFile
}

// freePort is a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	gomega.Expect(err).ToNot(gomega.HaveOccurred())
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
