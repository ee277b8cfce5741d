package manifest

import (
	"net/http"
	"net/url"
	"strings"
)

// RedactArgs returns a copy of a command line (bpfbench's own, or the
// server's) with the secrets it can carry replaced by SecretValue:
//
//   - the value of a header that holds a credential, given with --header
//     KEY=VALUE (Authorization, Proxy-Authorization, Cookie, or a name
//     that looks like a secret's, as EnvKeySecret says: X-Api-Key);
//   - the value of a flag whose name ends in key, token, secret,
//     password, passwd or credential(s) (a server's --api-key, --hf-token;
//     not --max-num-batched-tokens, not --api-key-file);
//   - a KEY=VALUE assignment whose key looks like a secret (HF_TOKEN=...);
//   - the password of a URL (http://user:PASSWORD@host).
//
// A manifest records that such a value was given, never the value.
func RedactArgs(args []string) []string {
	if args == nil {
		return nil
	}
	out := make([]string, len(args))
	var pending func(string) string // how to redact the next argument, the last flag's value
	for i, a := range args {
		if pending != nil {
			out[i], pending = pending(a), nil
			continue
		}
		out[i] = RedactURL(a)
		if !strings.HasPrefix(a, "-") || a == "-" || a == "--" {
			if k, _, ok := strings.Cut(a, "="); ok && isEnvName(k) && EnvKeySecret(k) {
				out[i] = k + "=" + SecretValue
			}
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		redact := RedactURL
		switch {
		case strings.EqualFold(name, "header"):
			redact = redactHeader
		case secretFlag(name):
			redact = func(string) string { return SecretValue }
		case !hasValue:
			continue
		}
		if hasValue {
			out[i] = a[:len(a)-len(value)] + redact(value)
		} else {
			pending = redact
		}
	}
	return out
}

// secretHeaders are the headers that carry credentials whatever their
// name says.
var secretHeaders = []string{"Authorization", "Proxy-Authorization", "Cookie"}

// redactHeader redacts the value of a KEY=VALUE (or KEY: VALUE) header
// that holds a credential.
func redactHeader(h string) string {
	i := strings.IndexAny(h, "=:")
	if i < 0 {
		return h
	}
	k := strings.TrimSpace(h[:i])
	for _, s := range secretHeaders {
		if http.CanonicalHeaderKey(k) == s {
			return h[:i+1] + SecretValue
		}
	}
	if EnvKeySecret(k) {
		return h[:i+1] + SecretValue
	}
	return h
}

// secretSuffixes end the names of the flags whose value is a secret.
var secretSuffixes = []string{"key", "token", "secret", "password", "passwd", "credential", "credentials"}

func secretFlag(name string) bool {
	n := strings.ToLower(name)
	for _, s := range secretSuffixes {
		if strings.HasSuffix(n, s) {
			return true
		}
	}
	return false
}

// isEnvName says whether k is spelt like an environment variable
// (HF_TOKEN): upper case letters, digits and underscores.
func isEnvName(k string) bool {
	if k == "" {
		return false
	}
	for _, r := range k {
		if !(r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

// RedactURL hides the password of a URL with one (https://user:secret@host
// becomes https://user:xxxxx@host); anything else is returned as it is.
func RedactURL(s string) string {
	if !strings.Contains(s, "://") || !strings.Contains(s, "@") {
		return s
	}
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	if _, ok := u.User.Password(); !ok {
		return s
	}
	return u.Redacted()
}
