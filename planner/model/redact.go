package model

import "strings"

// What the planner hides from a caller who may not read secrets (a
// viewer; planner/api redacts its answers): a diff against such an
// answer must know these to count what it cannot compare.

// HiddenCommand stands for a health check's command in a viewer's answer.
const HiddenCommand = "(hidden from viewers)"

// secretWords mark a label's key as holding a secret value.
var secretWords = []string{"secret", "token", "pass", "pwd", "credential", "apikey", "api_key", "api-key", "api.key",
	"private", "auth", "jwt", "ssh", "cookie", "session", "dsn", "bearer", "signing", "accesskey", "access_key", "access-key", "access.key"}

// secretEnds mark a key that ends in them as secret: access_key,
// signing-key, tls.key, and "key" alone (not "monkey").
var secretEnds = []string{"key", "_key", "-key", ".key", "_pw", "-pw", ".pw"} // [0] is matched whole

// SecretLabel reports whether a label with key is secret: its key holds
// one of secretWords (secret, token, pass — password, passwd, passphrase,
// db_pass —, pwd, credential, apikey, api_key, api-key, api.key, private,
// auth, jwt, ssh, cookie, session, dsn, bearer, signing, accesskey,
// access_key, access-key, access.key), or
// is "key" or "pw" or ends in _key, -key, .key, _pw, -pw or .pw, in any
// case (e.g. vault.token, DB_PASSWORD, access_key; attack review:
// access_key was shown).
// A secret in a label under another key is shown: put secrets in the
// environment, whose values viewers never see.
func SecretLabel(key string) bool {
	k := strings.ToLower(key)
	for _, w := range secretWords {
		if strings.Contains(k, w) {
			return true
		}
	}
	if k == "key" || k == "pw" {
		return true
	}
	for _, e := range secretEnds[1:] {
		if strings.HasSuffix(k, e) {
			return true
		}
	}
	return false
}
