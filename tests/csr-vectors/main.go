// Command csr-vectors prints, for PEM inputs that stress the framing of a certificate
// request, what Go's encoding/pem.Decode returns: the block kube-apiserver and the
// kube-apiserver-client signer read from a CSR's spec.request. The add-on manager's tests
// (resource-usage-hub/src/manager/registration/csr/) check that whatever the manager accepts, Go reads as
// the same single CERTIFICATE REQUEST block. Stdlib only; run ./gen.sh to regenerate.
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"runtime"
	"strings"
)

// The add-on agent's default subject for cluster c1 (addon-framework agent.DefaultUser and
// DefaultGroups) and an identity it must never obtain.
const (
	agentCN = "system:open-cluster-management:cluster:c1:addon:resource-usage-collect:agent:resource-usage-collect-agent"
	group1  = "system:open-cluster-management:cluster:c1:addon:resource-usage-collect"
	group2  = "system:open-cluster-management:addon:resource-usage-collect"
)

type block struct {
	Type    string `json:"type"`
	Headers int    `json:"headers"`
	SHA256  string `json:"sha256"`
	Rest    int    `json:"rest"`
}

type vector struct {
	Name string `json:"name"`
	// Input, base64 (it holds arbitrary bytes).
	Input string `json:"input"`
	// A canonical encoding of the agent's request: a strict reader must accept it.
	Valid bool `json:"valid"`
	// What pem.Decode returns; null when it finds no block.
	Block *block `json:"block"`
}

func request(cn string, orgs ...string) []byte {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	check(err)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: cn, Organization: orgs},
	}, key)
	check(err)
	return der
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func encode(label string, der []byte) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: label, Bytes: der}))
}

func main() {
	good := request(agentCN, group1, group2)
	other := request("system:open-cluster-management:cluster:c2:addon:resource-usage-collect:agent:resource-usage-collect-agent",
		"system:open-cluster-management:cluster:c2:addon:resource-usage-collect", group2)
	admin := request("kubernetes-admin", "kubeadm:cluster-admins")
	goodPEM := encode("CERTIFICATE REQUEST", good)
	adminPEM := encode("CERTIFICATE REQUEST", admin)
	otherPEM := encode("CERTIFICATE REQUEST", other)
	body := strings.TrimSuffix(strings.TrimPrefix(goodPEM, "-----BEGIN CERTIFICATE REQUEST-----\n"), "-----END CERTIFICATE REQUEST-----\n")
	begin, end := "-----BEGIN CERTIFICATE REQUEST-----", "-----END CERTIFICATE REQUEST-----"
	oneLine := base64.StdEncoding.EncodeToString(good)

	type in struct {
		name  string
		text  string
		valid bool
	}
	inputs := []in{
		{"canonical", goodPEM, true},
		{"crlf line ends", strings.ReplaceAll(goodPEM, "\n", "\r\n"), true},
		{"leading newlines", "\n\n" + goodPEM, true},
		{"trailing whitespace lines", goodPEM + "\n \t\n", true},
		{"no final newline", strings.TrimSuffix(goodPEM, "\n"), true},
		{"body on one line", begin + "\n" + oneLine + "\n" + end + "\n", true},
		{"mismatched END label then another cluster's block", begin + "\n" + body + "-----END X-----\n" + otherPEM, false},
		{"mismatched END label then kubernetes-admin", begin + "\n" + body + "-----END X-----\n" + adminPEM, false},
		{"junk after BEGIN then kubernetes-admin", begin + " junk\n" + body + end + "\n" + adminPEM, false},
		{"junk after END then kubernetes-admin", begin + "\n" + body + end + " junk\n" + adminPEM, false},
		{"trailing second block", goodPEM + adminPEM, false},
		{"leading garbage", "garbage\n" + goodPEM, false},
		{"leading garbage on the BEGIN line", "garbage" + goodPEM, false},
		{"leading spaces before BEGIN", "  " + goodPEM, false},
		{"leading block of another type", encode("CERTIFICATE", admin) + goodPEM, false},
		{"PEM headers", begin + "\nProc-Type: 4,ENCRYPTED\n\n" + body + end + "\n", false},
		{"DER", string(good), false},
		{"label NEW CERTIFICATE REQUEST", encode("NEW CERTIFICATE REQUEST", good), false},
		{"label CERTIFICATE", encode("CERTIFICATE", good), false},
		{"spaces in the body", begin + "\n" + strings.ReplaceAll(body, "A", "A ") + end + "\n", false},
		{"tab after BEGIN", begin + "\t\n" + body + end + "\n", false},
		{"repeated BEGIN line", begin + "\n" + goodPEM, false},
		{"BEGIN of kubernetes-admin without END, then the agent", begin + "\n" + strings.TrimSuffix(strings.TrimPrefix(adminPEM, begin+"\n"), end+"\n") + goodPEM, false},
		{"empty body", begin + "\n" + end + "\n", false},
		{"END glued to the body", begin + "\n" + strings.TrimSuffix(body, "\n") + end + "\n", false},
		{"blank line in the body", begin + "\n\n" + body + end + "\n", false},
		{"lone CR in the body", begin + "\n" + strings.Replace(body, "\n", "\r", 1) + end + "\n", false},
		{"padding mid-body", begin + "\n" + base64.StdEncoding.EncodeToString(good[:10]) + "\n" + base64.StdEncoding.EncodeToString(good[10:]) + "\n" + end + "\n", false},
		{"nothing", "", false},
	}

	// Mutations of the canonical request: tokens that change PEM framing, inserted, deleted
	// and replaced at random places (a fixed seed, so a regeneration is reviewable).
	tokens := []string{"\n", "\r\n", "\r", " ", "\t", "-", "-----", "=", "A", ":", "x: y\n",
		end + "\n", begin + "\n", "-----END X-----\n", "\n-----END X-----\n", adminPEM, begin, end}
	r := mrand.New(mrand.NewPCG(15, 1))
	for i := range 100 {
		s := goodPEM
		if i%4 == 3 {
			s = goodPEM + adminPEM
		}
		for range 1 + r.IntN(3) {
			p := r.IntN(len(s) + 1)
			switch r.IntN(4) {
			case 0, 1:
				s = s[:p] + tokens[r.IntN(len(tokens))] + s[p:]
			case 2:
				q := min(len(s), p+1+r.IntN(8))
				s = s[:p] + s[q:]
			default:
				if p < len(s) {
					t := tokens[r.IntN(len(tokens))]
					s = s[:p] + t[:1] + s[p+1:]
				}
			}
		}
		inputs = append(inputs, in{fmt.Sprintf("mutation %d", i), s, false})
	}

	out := struct {
		Go      string   `json:"go"`
		Vectors []vector `json:"vectors"`
	}{Go: runtime.Version()}
	for _, v := range inputs {
		vec := vector{Name: v.name, Input: base64.StdEncoding.EncodeToString([]byte(v.text)), Valid: v.valid}
		if b, rest := pem.Decode([]byte(v.text)); b != nil {
			sum := sha256.Sum256(b.Bytes)
			vec.Block = &block{Type: b.Type, Headers: len(b.Headers), SHA256: hex.EncodeToString(sum[:]), Rest: len(rest)}
		}
		out.Vectors = append(out.Vectors, vec)
	}
	// One vector a line, so that a regeneration diffs readably.
	fmt.Printf("{\"go\": %q, \"vectors\": [\n", out.Go)
	for i, v := range out.Vectors {
		line, err := json.Marshal(v)
		check(err)
		sep := ","
		if i == len(out.Vectors)-1 {
			sep = ""
		}
		fmt.Printf("%s%s\n", line, sep)
	}
	fmt.Println("]}")
}
