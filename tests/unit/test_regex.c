/* tests: the patterns of JSON Schema (engine/regex.h) as automata over
 * UTF-8 bytes.
 *
 * Hand-written cases (pattern, text, match) for each construct; patterns
 * refused with the reason named; the bounds (a pattern's length, the
 * automaton's states, the work of making it) hold and take little time.
 * Then JavaScript itself is the oracle: for 44 patterns, strings the
 * automaton accepts (random walks through it), random strings over the
 * pattern's own characters and others, and mutations of the accepted
 * ones are written with the automaton's verdicts to a file, and
 * tools/regex_oracle.mjs checks each against `new RegExp(p, "u").test(s)`
 * (skipped, saying so, where node is not installed). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "check.h"
#include "engine/regex.h"

static int match(const char *p, const char *s) {
  dsi_redfa d;
  char why[200];
  if (dsi_redfa_compile(&d, p, strlen(p), why, sizeof why)) {
    fprintf(stderr, "    /%s/ refused: %s\n", p, why);
    return -1;
  }
  int m = dsi_redfa_match(&d, s, strlen(s));
  dsi_redfa_free(&d);
  return m;
}

/* the states from which an accepting one can be reached */
static uint8_t *live_states(const dsi_redfa *d) {
  uint8_t *live = calloc((size_t)d->n_states, 1);
  DSI_ASSERT(live);
  for (int s = 0; s < d->n_states; s++) live[s] = d->accept[s];
  for (int changed = 1; changed;) {
    changed = 0;
    for (int s = 0; s < d->n_states; s++)
      for (int c = 0; c < d->n_cls && !live[s]; c++) {
        uint16_t t = d->next[(size_t)s * (size_t)d->n_cls + (size_t)c];
        if (t != DSI_RE_DEAD && live[t]) live[s] = 1, changed = 1;
      }
  }
  return live;
}

/* a random string the automaton accepts, into out (0: none in max bytes) */
static int accepted_walk(const dsi_redfa *d, const uint8_t *live, dsi_rng *r, char *out, size_t max) {
  uint32_t st = 0;
  size_t n = 0;
  if (!live[0]) return 0;
  for (;;) {
    if (d->accept[st] && (dsi_rng_u64(r) % 4 == 0 || n + 8 > max)) break;
    int cls[256], k = 0;
    for (int c = 0; c < d->n_cls; c++) {
      uint16_t t = d->next[(size_t)st * (size_t)d->n_cls + (size_t)c];
      if (t != DSI_RE_DEAD && live[t] && d->rep[c] != 0) cls[k++] = c; /* no NUL: C strings */
    }
    if (!k || n + 8 > max) {
      if (d->accept[st]) break;
      return 0;
    }
    int c = cls[dsi_rng_u64(r) % (uint64_t)k];
    uint8_t bytes[256];
    int nb = 0;
    for (int b = 1; b < 256; b++)
      if (d->cls[b] == c) bytes[nb++] = (uint8_t)b;
    uint8_t b = bytes[dsi_rng_u64(r) % (uint64_t)nb];
    out[n++] = (char)b;
    st = d->next[(size_t)st * (size_t)d->n_cls + (size_t)c];
  }
  out[n] = 0;
  return 1;
}

/* the UTF-8 characters of s as pointers to their starts: their count */
static int split_chars(const char *s, const char **at, int max) {
  int k = 0;
  for (const char *p = s; *p && k < max; p++)
    if ((*p & 0xC0) != 0x80) at[k++] = p;
  return k;
}

static void oracle(void) {
  static const char *const pats[] = {
    "^[a-z]+@[a-z]+\\.(com|org)$", "^\\d{3}-\\d{4}$", "abc", "^(foo|bar)?x{2,3}$", "^[^a-z]$", "^.$", "^.*$",
    "a{0}b", "^(ab|a)(bc|c)$", "^\\w+$", "^\\W*$", "^\\s+$", "^\\S{2}$", "^[\\d\\s]+$", "^[^\\d\\s]+$",
    "^\\u00e9+$", "^[\\u00e0-\\u00ff]{1,2}$", "^\\u{1F600}$", "^\\uD83D\\uDE00.$", "^[😀-😂]+$", "^é.?€$",
    "^(?:a|b)*?c$", "^(?<y>\\d{4})-(?<m>\\d{2})$", "^[\\-+]?\\d+(\\.\\d+)?$", "\\.", "^\\/\\*$", "^\\x41\\x7a$",
    "^\\cJ?a$", "^[\\b]$", "^\\t\\n\\v\\f\\r$", "^\\0$", "^a|b$", "^a|^b|c$", "x$|^y", "^[]$", "^[^]$",
    "^(a(b(c)?)?)+$", "^(?:[A-Z][a-z]*\\s?){1,3}$", "^(?:[A-Za-z0-9+/]{4})*$", "^\\p?$" /* \p: refused */,
    "^([01]?\\d|2[0-3]):[0-5]\\d$", "^[^\\n\\r]*$", "^\\$\\^\\.\\[\\]\\(\\)\\{\\}\\|\\?\\*\\+$", "^a{2,}$",
    "^(\\d+,)*\\d+$",
  };
  static const char extra[][5] = {"a", "Z", "0", "9", "-", ".", " ", "\n", "\xc3\xa9", "\xf0\x9f\x98\x80", "\xe2\x82\xac",
                                  "_", "\t", "\xc2\xa0", "\xe2\x80\xa8", "@", "x", "b", "c", ":"};
  char file[64];
  snprintf(file, sizeof file, "/tmp/dsinfer_regex_%d.json", (int)getpid());
  FILE *f = fopen(file, "w");
  DSI_ASSERT(f);
  fputs("[", f);
  dsi_rng r;
  dsi_rng_seed(&r, 3);
  long n_cases = 0, n_pos = 0;
  for (size_t i = 0; i < DSI_ARRAY_LEN(pats); i++) {
    dsi_redfa d;
    char why[200];
    if (dsi_redfa_compile(&d, pats[i], strlen(pats[i]), why, sizeof why)) {
      CHECKF(strstr(pats[i], "\\p") != NULL, "/%s/ compiles: %s", pats[i], why);
      continue;
    }
    uint8_t *live = live_states(&d);
    /* the pattern's own characters, and some others */
    const char *own[128];
    int n_own = split_chars(pats[i], own, 128);
    char s[128];
    for (int k = 0; k < 400; k++) {
      int kind = k % 3;
      if (kind == 0) { /* accepted by the automaton */
        if (!accepted_walk(&d, live, &r, s, 40)) continue;
      } else if (kind == 1) { /* random */
        size_t n = 0;
        int len = (int)(dsi_rng_u64(&r) % 8);
        for (int q = 0; q < len; q++) {
          const char *c;
          size_t cl;
          if (dsi_rng_u64(&r) & 1) {
            c = own[dsi_rng_u64(&r) % (uint64_t)n_own];
            cl = 1;
            while (c[cl] && (c[cl] & 0xC0) == 0x80) cl++;
          } else {
            c = extra[dsi_rng_u64(&r) % DSI_ARRAY_LEN(extra)];
            cl = strlen(c);
          }
          memcpy(s + n, c, cl), n += cl;
        }
        s[n] = 0;
      } else { /* an accepted one, a character changed, dropped or added */
        char base[64];
        if (!accepted_walk(&d, live, &r, base, 40)) continue;
        const char *at[64];
        int nc = split_chars(base, at, 64), pos = nc ? (int)(dsi_rng_u64(&r) % (uint64_t)(nc + 1)) : 0;
        size_t cut = pos < nc ? (size_t)(at[pos] - base) : strlen(base);
        size_t next = pos < nc ? (pos + 1 < nc ? (size_t)(at[pos + 1] - base) : strlen(base)) : cut;
        const char *c = extra[dsi_rng_u64(&r) % DSI_ARRAY_LEN(extra)];
        int op = (int)(dsi_rng_u64(&r) % 3);
        size_t n = 0;
        memcpy(s, base, cut), n = cut;
        if (op != 1) memcpy(s + n, c, strlen(c)), n += strlen(c); /* replace or insert */
        size_t from = op == 2 ? cut : next;
        memcpy(s + n, base + from, strlen(base) - from), n += strlen(base) - from;
        s[n] = 0;
      }
      int m = dsi_redfa_match(&d, s, strlen(s));
      n_pos += m;
      fputs(n_cases++ ? ",\n{\"p\":" : "\n{\"p\":", f);
      dsi_json_put_str(f, pats[i], strlen(pats[i]));
      fputs(",\"s\":", f);
      dsi_json_put_str(f, s, strlen(s));
      fprintf(f, ",\"m\":%s}", m ? "true" : "false");
    }
    free(live);
    dsi_redfa_free(&d);
  }
  fputs("]\n", f);
  fclose(f);
  printf("%ld cases (%ld matching) for JavaScript's RegExp\n", n_cases, n_pos);
  if (system("command -v node >/dev/null 2>&1")) {
    printf("oracle: skipped (node is not installed; scripts/deps.sh installs it)\n");
  } else {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "node tools/regex_oracle.mjs %s", file);
    CHECKF(system(cmd) == 0, "every verdict agrees with JavaScript's (%s)", cmd);
  }
  remove(file);
}

int main(void) {
  static const struct {
    const char *p, *s;
    int m;
  } cases[] = {
    {"^[a-z]+@[a-z]+\\.com$", "ab@cd.com", 1}, {"^[a-z]+@[a-z]+\\.com$", "ab@cd.co", 0},
    {"[a-z]+@", "x ab@", 1}, {"abc", "xxabcxx", 1}, {"abc", "ab", 0}, {"^abc", "abcd", 1}, {"abc$", "xabc", 1},
    {"abc$", "abcx", 0}, {"^\\d{3}$", "123", 1}, {"^\\d{3}$", "1234", 0}, {"^\\d{2,}$", "12345", 1},
    {"^\\d{2,3}$", "1234", 0}, {"^x{0}$", "", 1}, {"^x{0}$", "x", 0}, {"^(a|ab)(c|bcd)$", "abcd", 1},
    {"^[^a-z]$", "\xc3\xa9", 1}, {"^[^a-z]$", "q", 0}, {"^.$", "\xf0\x9f\x98\x80", 1}, {"^.$", "\n", 0},
    {"^.$", "\xe2\x80\xa8", 0}, {"^[^]$", "\n", 1}, {"^[]$", "", 0}, {"^[]?$", "", 1},
    {"^\\s$", "\xe3\x80\x80", 1}, {"^\\S$", "\xe3\x80\x80", 0}, {"^\\w+$", "a_Z9", 1}, {"^\\w$", "\xc3\xa9", 0},
    {"^a{1,2}?$", "aa", 1}, {"^a+?b*?$", "aabb", 1}, {"^\\u{1F600}$", "\xf0\x9f\x98\x80", 1},
    {"^\\uD83D\\uDE00$", "\xf0\x9f\x98\x80", 1}, {"^\\x41$", "A", 1}, {"^[\\x41-\\x43]+$", "ABC", 1},
    {"^a{,2}$", "a{,2}", 1} /* not a quantifier: literal, as without the u flag */, {"^a{2", "a{2", 1},
    {"^\\.$", ".", 1}, {"^\\.$", "x", 0}, {"^[.]$", "x", 0}, {"^[\\]]$", "]", 1}, {"^[a\\-z]$", "-", 1},
    {"^[a-]$", "-", 1}, {"^[\\d-x]$", "-", 1} /* a class escape at a range's end: refused below */,
    {"^(?:ab)+$", "abab", 1}, {"^(?<n>a)b$", "ab", 1}, {"^a|b$", "xb", 1}, {"^a|b$", "ax", 1}, {"^a|b$", "xa", 0},
    {"^$", "", 1}, {"^$", "a", 0}, {"", "anything", 1}, {"^\\/$", "/", 1}, {"^\\t\\0$", "\t", 0},
  };
  for (size_t i = 0; i < DSI_ARRAY_LEN(cases); i++) {
    int m = match(cases[i].p, cases[i].s);
    if (strstr(cases[i].p, "[\\d-x]")) {
      CHECKF(m == -1, "/%s/ refused", cases[i].p);
      continue;
    }
    CHECKF(m == cases[i].m, "/%s/ on \"%s\": %d (want %d)", cases[i].p, cases[i].s, m, cases[i].m);
  }
  printf("%zu cases by hand\n", DSI_ARRAY_LEN(cases));
  /* refused, saying why */
  static const struct {
    const char *p, *says;
  } refused[] = {
    {"(?=a)", "lookaround"}, {"(?!a)", "lookaround"}, {"(?<=a)b", "lookaround"}, {"(?<!a)b", "lookaround"},
    {"(a)\\1", "back references"}, {"(?<n>a)\\k<n>", "back references"}, {"\\bword\\b", "word boundary"},
    {"\\p{L}", "property"}, {"a**", "nothing to repeat"}, {"*a", "nothing to repeat"}, {"a{2}{3}", "nothing to repeat"},
    {"[z-a]", "out of order"}, {"(a", "not closed"}, {"a)", "unmatched ')'"}, {"[abc", "not closed"},
    {"a^b", "'^'"}, {"(^a)", "'^'"}, {"a$b", "'$'"}, {"(a$)", "'$'"}, {"a{1001}", "above 1000"},
    {"a{3,2}", "n above m"}, {"\\q", "unknown escape"}, {"\\x4", "hex digits"}, {"\\u12", "hex digits"},
    {"\\uD800", "lone surrogate"}, {"\\u{110000}", "code point"}, {"a\\", "lone '\\'"}, {"\\01", "octal"},
    {"(?x)", "unknown group"}, {"\xc3", "UTF-8"}, {"\xff", "UTF-8"}, {"[\\w-z]", "range"},
    {"a.{14}$", "states"} /* 2^14 positions to remember */,
  };
  for (size_t i = 0; i < DSI_ARRAY_LEN(refused); i++) {
    dsi_redfa d;
    char why[200];
    int rc = dsi_redfa_compile(&d, refused[i].p, strlen(refused[i].p), why, sizeof why);
    CHECKF(rc == DSI_E_INVAL && strstr(why, refused[i].says), "/%s/ refused saying '%s': %s", refused[i].p,
           refused[i].says, rc ? why : "compiled");
    if (!rc) dsi_redfa_free(&d);
  }
  printf("%zu patterns refused\n", DSI_ARRAY_LEN(refused));
  /* the bounds: a long pattern, nested counts, a blown-up automaton, each refused soon */
  {
    static char big[5000];
    memset(big, 'a', sizeof big - 1);
    dsi_redfa d;
    char why[200];
    CHECK(dsi_redfa_compile(&d, big, strlen(big), why, sizeof why) == DSI_E_INVAL && strstr(why, "longer than"));
    big[0] = '^', big[3001] = '$', big[3002] = 0; /* 3,000 literals: taken */
    CHECK(dsi_redfa_compile(&d, big, strlen(big), why, sizeof why) == DSI_OK && dsi_redfa_match(&d, big + 1, 3000) &&
          !dsi_redfa_match(&d, big + 1, 2999));
    dsi_redfa_free(&d);
    static const char *const hard[] = {"^((a{1000}){1000}){1000}$", "^(.*){1000}x.{12}$", "^([\\s\\S]{1,1000}){1,1000}$",
                                       "(a|aa|aaa|aaaa)*b{1000}[^b]{1000}"};
    for (size_t i = 0; i < DSI_ARRAY_LEN(hard); i++) {
      double t0 = dsi_now();
      int rc = dsi_redfa_compile(&d, hard[i], strlen(hard[i]), why, sizeof why);
      double dt = dsi_now() - t0;
      printf("/%s/: %s in %.0f ms\n", hard[i], rc ? why : "compiled", dt * 1e3);
      CHECKF(rc == DSI_E_INVAL || rc == DSI_OK, "/%s/: a verdict", hard[i]);
      if (!rc) dsi_redfa_free(&d);
    }
  }
  oracle();
  return check_done();
}
