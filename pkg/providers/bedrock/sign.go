package bedrock

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/valyala/fasthttp"
)

// signingService is the SigV4 service name of the Bedrock runtime.
const signingService = "bedrock"

// signer signs requests with AWS Signature Version 4 through the AWS SDK.
// It is safe for concurrent use: the SDK signer caches derived keys behind
// its own lock.
type signer struct {
	v4      *v4.Signer
	creds   aws.Credentials // a secret: never logged
	region  string
	service string
}

func newSigner(region, accessKeyID, secret, sessionToken string) *signer {
	return &signer{
		v4:      v4.NewSigner(),
		creds:   aws.Credentials{AccessKeyID: accessKeyID, SecretAccessKey: secret, SessionToken: sessionToken, Source: "tollgate"},
		region:  region,
		service: signingService,
	}
}

// signedHeaders are the headers SigV4 adds, copied onto the fasthttp request.
var signedHeaders = [...]string{"Authorization", "X-Amz-Date", "X-Amz-Security-Token", "X-Amz-Content-Sha256"}

// signFast signs a built fasthttp request: the SDK signer needs a
// *http.Request, so a minimal one mirrors the method, host, escaped path,
// content type and length and the static headers that fasthttp will send,
// and the headers the signer sets are copied back. host and path are the
// request's, as sent.
func (s *signer) signFast(req *fasthttp.Request, scheme, host string, path []byte, static [][2]string, t time.Time) error {
	body := req.Body()
	sum := sha256.Sum256(body)
	var hexSum [2 * sha256.Size]byte
	hex.Encode(hexSum[:], sum[:])
	hr := &http.Request{
		Method:        string(req.Header.Method()),
		URL:           &url.URL{Scheme: scheme, Host: host, Opaque: "//" + host + string(path)},
		Host:          host,
		Header:        http.Header{"Content-Type": {string(req.Header.ContentType())}},
		ContentLength: int64(len(body)),
	}
	for _, h := range static {
		hr.Header.Add(h[0], h[1])
	}
	if err := s.sign(hr, string(hexSum[:]), t); err != nil {
		return err
	}
	for _, h := range signedHeaders {
		if v := hr.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	return nil
}

// sign adds the SigV4 headers to hr for a body with the given hex SHA-256.
func (s *signer) sign(hr *http.Request, payloadHash string, t time.Time) error {
	if err := s.v4.SignHTTP(context.Background(), s.creds, hr, payloadHash, s.service, s.region, t); err != nil {
		return fmt.Errorf("sign request: %w", err)
	}
	return nil
}
