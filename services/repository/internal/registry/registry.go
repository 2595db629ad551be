// Package registry reads the tags of a container image from an image
// registry through the OCI distribution API (GET /v2/<name>/tags/list),
// following the Link header's pages and the registry's authentication
// challenge (HTTP basic, or the bearer token service of the distribution
// token specification), and orders them newest first.
//
// It answers with errs codes: a registry that fails, refuses the
// credentials or cannot be reached is 503 ERROR_REGISTRY_UNAVAILABLE, an
// image the registry does not know is 404 ERROR_NO_IMAGE_IN_REGISTRY. Its
// errors never carry what the registry answered (a body, a header): a
// registry_url pointed at some other server must not turn into a reader
// of that server. Its requests go through pkg/outward (the registry_url
// and the token realm are user input). It knows no plugin and stores
// nothing.
package registry

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/semver"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/outward"
)

// Credentials are a plugin's registry_config credentials: a user name and
// password (basic, or exchanged at the token service), or a bearer token.
type Credentials struct {
	Username string
	Password string
	Token    string
}

// Client reads tags. The zero value is not usable; call New.
type Client struct {
	http     *http.Client
	pageSize int
	maxPages int
}

// Timeout bounds one registry request.
const Timeout = 20 * time.Second

// New returns a client reaching the inward addresses allow lets it reach.
// pageSize is the n asked per page (0: 100).
func New(allow outward.Allow, pageSize int) *Client {
	if pageSize <= 0 {
		pageSize = 100
	}
	return &Client{http: outward.Client(allow, Timeout), pageSize: pageSize, maxPages: 1000}
}

// maxBody bounds one page of tags.
const maxBody = 8 << 20

// BaseURL turns a registry_url ("registry.example.com:5000",
// "https://ghcr.io") into the base URL requests start from. Docker Hub's
// names are mapped onto its API host.
func BaseURL(s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", fmt.Errorf("empty")
	}
	if !strings.Contains(s, "://") {
		s = "https://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("not a URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("scheme %q is not http or https", u.Scheme)
	}
	if u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("want scheme://host[:port][/path]")
	}
	switch u.Hostname() {
	case "docker.io", "index.docker.io", "hub.docker.com":
		u.Host = "registry-1.docker.io"
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// RepositoryName is the registry's name of an image: without a tag or a
// digest, and without a leading registry host. On Docker Hub a name of
// one segment lives under library/.
func RepositoryName(base, image string) string {
	name, _, _ := strings.Cut(image, "@")
	if i := strings.LastIndex(name, "/"); strings.LastIndex(name, ":") > i {
		name = name[:strings.LastIndex(name, ":")]
	}
	if first, rest, ok := strings.Cut(name, "/"); ok && (strings.ContainsAny(first, ".:") || first == "localhost") {
		name = rest
	}
	if strings.Contains(base, "://registry-1.docker.io") && !strings.Contains(name, "/") {
		name = "library/" + name
	}
	return name
}

// Tags lists every tag of image at the registry base, newest first.
func (c *Client) Tags(ctx context.Context, base, image string, cred Credentials) ([]string, error) {
	name := RepositoryName(base, image)
	s := &session{c: c, cred: cred, name: name, base: base}
	if cred.Token != "" {
		s.authz = "Bearer " + cred.Token
	}
	next := base + "/v2/" + name + "/tags/list?n=" + strconv.Itoa(c.pageSize)
	var tags []string
	for page := 0; next != ""; page++ {
		if page == c.maxPages {
			return nil, unavailable(base, fmt.Errorf("more than %d pages of tags", c.maxPages))
		}
		var got []string
		var err error
		got, next, err = s.page(ctx, next)
		if err != nil {
			return nil, err
		}
		tags = append(tags, got...)
	}
	return Sort(tags), nil
}

// session is one listing: the credentials and the authorization that
// the registry's challenge led to.
type session struct {
	c     *Client
	cred  Credentials
	name  string
	base  string
	authz string // Authorization header value, once known
}

func (s *session) page(ctx context.Context, u string) ([]string, string, error) {
	resp, err := s.get(ctx, u, s.authz)
	if err != nil {
		return nil, "", err
	}
	if resp.StatusCode == http.StatusUnauthorized {
		challenge := resp.Header.Get("WWW-Authenticate")
		drain(resp)
		authz, err := s.authorize(ctx, challenge)
		if err != nil {
			return nil, "", err
		}
		s.authz = authz
		if resp, err = s.get(ctx, u, s.authz); err != nil {
			return nil, "", err
		}
	}
	defer drain(resp)
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return nil, "", errs.New(errs.NoImageInRegistry, "The image %s is not in the registry %s.", s.name, s.base)
	case http.StatusUnauthorized, http.StatusForbidden:
		return nil, "", unavailable(s.base, fmt.Errorf("the registry refused the credentials of registry_config (status %d)", resp.StatusCode))
	default:
		return nil, "", unavailable(s.base, fmt.Errorf("status %d", resp.StatusCode))
	}
	var body struct {
		Tags []string `json:"tags"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxBody)).Decode(&body); err != nil {
		return nil, "", unavailable(s.base, errors.New("undecodable tag list"))
	}
	next, err := nextLink(u, resp.Header.Values("Link"))
	if err != nil {
		return nil, "", unavailable(s.base, err)
	}
	return body.Tags, next, nil
}

func (s *session) get(ctx context.Context, u, authz string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, unavailable(s.base, err)
	}
	req.Header.Set("Accept", "application/json")
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	resp, err := s.c.http.Do(req)
	if err != nil {
		return nil, unavailable(s.base, err)
	}
	return resp, nil
}

// authorize answers a 401 challenge: basic with the configured user, or a
// token from the bearer realm (anonymous when no user is configured).
func (s *session) authorize(ctx context.Context, challenge string) (string, error) {
	scheme, params := parseChallenge(challenge)
	switch strings.ToLower(scheme) {
	case "basic":
		if s.cred.Username == "" && s.cred.Password == "" {
			return "", unavailable(s.base, fmt.Errorf("the registry wants a user name and password (registry_config username, password)"))
		}
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(s.cred.Username+":"+s.cred.Password)), nil
	case "bearer":
		return s.token(ctx, params)
	}
	return "", unavailable(s.base, errors.New("the registry answered 401 with an unknown authentication challenge"))
}

// token fetches a bearer token from the realm of the challenge.
func (s *session) token(ctx context.Context, params map[string]string) (string, error) {
	realm, err := url.Parse(params["realm"])
	if err != nil || (realm.Scheme != "http" && realm.Scheme != "https") || realm.Host == "" {
		return "", unavailable(s.base, errors.New("the registry's token realm is not an http(s) URL"))
	}
	q := realm.Query()
	if v := params["service"]; v != "" {
		q.Set("service", v)
	}
	scope := params["scope"]
	if scope == "" {
		scope = "repository:" + s.name + ":pull"
	}
	q.Set("scope", scope)
	realm.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, realm.String(), nil)
	if err != nil {
		return "", unavailable(s.base, err)
	}
	if s.cred.Username != "" || s.cred.Password != "" {
		req.SetBasicAuth(s.cred.Username, s.cred.Password)
	}
	resp, err := s.c.http.Do(req)
	if err != nil {
		return "", unavailable(s.base, fmt.Errorf("token service: %w", err))
	}
	defer drain(resp)
	if resp.StatusCode != http.StatusOK {
		return "", unavailable(s.base, fmt.Errorf("the token service refused the credentials of registry_config (status %d)", resp.StatusCode))
	}
	var body struct {
		Token       string `json:"token"`
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&body); err != nil {
		return "", unavailable(s.base, errors.New("token service: undecodable answer"))
	}
	tok := body.Token
	if tok == "" {
		tok = body.AccessToken
	}
	if tok == "" {
		return "", unavailable(s.base, fmt.Errorf("token service answered no token"))
	}
	return "Bearer " + tok, nil
}

// parseChallenge reads `Scheme k="v",k2="v2"` (values may hold commas).
func parseChallenge(h string) (string, map[string]string) {
	h = strings.TrimSpace(h)
	scheme, rest, _ := strings.Cut(h, " ")
	params := map[string]string{}
	for rest = strings.TrimSpace(rest); rest != ""; {
		k, after, ok := strings.Cut(rest, "=")
		if !ok {
			break
		}
		k = strings.ToLower(strings.TrimSpace(k))
		after = strings.TrimSpace(after)
		var v string
		if strings.HasPrefix(after, `"`) {
			end := strings.Index(after[1:], `"`)
			if end < 0 {
				v, after = after[1:], ""
			} else {
				v, after = after[1:1+end], after[2+end:]
			}
		} else {
			v, after, _ = strings.Cut(after, ",")
			v = strings.TrimSpace(v)
			after = "," + after
		}
		params[k] = v
		rest = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(after), ","))
	}
	return scheme, params
}

// nextLink is the URL of the rel="next" Link, resolved against the
// current page, or "" on the last page.
func nextLink(current string, links []string) (string, error) {
	for _, h := range links {
		for l := range strings.SplitSeq(h, ",") {
			target, attrs, ok := strings.Cut(strings.TrimSpace(l), ";")
			if !ok || !strings.Contains(strings.ReplaceAll(attrs, " ", ""), `rel="next"`) {
				continue
			}
			target = strings.Trim(strings.TrimSpace(target), "<>")
			cur, err := url.Parse(current)
			if err != nil {
				return "", err
			}
			ref, err := url.Parse(target)
			if err != nil {
				return "", errors.New("bad Link header")
			}
			next := cur.ResolveReference(ref)
			if next.Host != cur.Host {
				return "", errors.New("the Link header leaves the registry")
			}
			return next.String(), nil
		}
	}
	return "", nil
}

// Sort orders tags newest first by semantic version (a leading v is
// optional; a pre-release precedes its release); tags that are not
// versions (latest, dev) follow in the registry's order.
func Sort(tags []string) []string {
	var versions, others []string
	for _, t := range tags {
		if semver.IsValid(canonical(t)) {
			versions = append(versions, t)
		} else {
			others = append(others, t)
		}
	}
	slices.SortStableFunc(versions, func(a, b string) int {
		if c := semver.Compare(canonical(b), canonical(a)); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return append(versions, others...)
}

func canonical(t string) string {
	if strings.HasPrefix(t, "v") {
		return t
	}
	return "v" + t
}

func unavailable(base string, cause error) error {
	e := errs.New(errs.RegistryUnavailable, "The image registry %s is unavailable: %s.", base, cause.Error())
	e.Cause = cause
	return e
}

func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	_ = resp.Body.Close()
}
