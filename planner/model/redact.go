package model

import "strings"

// What the planner hides from a caller who may not read secrets (a
// viewer; planner/api redacts its answers): a diff against such an
// answer must know these to count what it cannot compare.

// HiddenCommand stands for a health check's command in a viewer's answer.
const HiddenCommand = "(hidden from viewers)"

// secretWords mark a label's key as holding a secret value.
var secretWords = []string{"secret", "token", "password", "passwd", "passphrase", "pwd", "credential", "apikey", "api_key", "api-key", "api.key",
	"private", "auth", "jwt", "ssh", "cookie", "session", "dsn"}

// SecretLabel reports whether a label with key is secret: its key holds
// one of secretWords (secret, token, password, passwd, passphrase, pwd,
// credential, apikey, api_key, api-key, api.key, private, auth, jwt, ssh,
// cookie, session, dsn), in any case (e.g. vault.token, DB_PASSWORD).
// A secret in a label under another key is shown: put secrets in the
// environment, whose values viewers never see.
func SecretLabel(key string) bool {
	k := strings.ToLower(key)
	for _, w := range secretWords {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}
