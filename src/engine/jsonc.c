/* engine: the JSON object recognizer (jsonc.h) — one state machine over
 * bytes with a stack of the open containers, a bit each. */
#include "engine/jsonc.h"

enum {
  J_START,     /* before the object: white space or '{' */
  J_VALUE,     /* a value: after ':' or an array's ',' */
  J_ARR_FIRST, /* after '[': a value or ']' */
  J_OBJ_FIRST, /* after '{': a name or '}' */
  J_NAME,      /* after an object's ',': a name */
  J_COLON,     /* after a name */
  J_AFTER,     /* after a value: ',' or the container's end */
  J_STR,       /* in a string */
  J_ESC,       /* after '\' in a string */
  J_HEX,       /* in \uXXXX: aux digits left */
  J_LIT,       /* in true / false / null: aux characters read */
  J_N_MINUS,   /* a number: after '-' */
  J_N_ZERO,    /* its integer part is 0 */
  J_N_INT,     /* in its integer part */
  J_N_DOT,     /* after '.' */
  J_N_FRAC,    /* in its fraction */
  J_N_E,       /* after 'e' or 'E' */
  J_N_ESIGN,   /* after the exponent's sign */
  J_N_EXP,     /* in the exponent */
  J_DONE,      /* the object is complete */
};

static const char *const k_lits[3] = {"true", "false", "null"};

void dsi_jsonc_init(dsi_jsonc *j) { *j = (dsi_jsonc){.st = J_START}; }

int dsi_jsonc_done(const dsi_jsonc *j) { return j->st == J_DONE; }

static int is_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
static int is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

static int open_c(dsi_jsonc *j, int object) {
  if (j->depth >= DSI_JSONC_MAX_DEPTH) return -1;
  if (object) j->stack |= 1ull << j->depth;
  else j->stack &= ~(1ull << j->depth);
  j->depth++;
  j->st = object ? J_OBJ_FIRST : J_ARR_FIRST;
  return 0;
}

static int top_is_object(const dsi_jsonc *j) { return (int)((j->stack >> (j->depth - 1)) & 1); }

static int close_c(dsi_jsonc *j, int object) {
  if (!j->depth || top_is_object(j) != object) return -1;
  j->depth--;
  j->st = j->depth ? J_AFTER : J_DONE;
  return 0;
}

/* the first byte of a value */
static int value(dsi_jsonc *j, uint8_t c) {
  switch (c) {
  case '{': return open_c(j, 1);
  case '[': return open_c(j, 0);
  case '"': j->st = J_STR, j->key = 0; return 0;
  case '-': j->st = J_N_MINUS; return 0;
  case '0': j->st = J_N_ZERO; return 0;
  case 't': case 'f': case 'n':
    j->st = J_LIT, j->lit = c == 't' ? 0 : c == 'f' ? 1 : 2, j->aux = 1;
    return 0;
  default:
    if (is_digit(c)) return j->st = J_N_INT, 0;
    return -1;
  }
}

static int step(dsi_jsonc *j, uint8_t c) {
  /* white space between tokens, a few bytes in a row at most */
  int between = j->st <= J_AFTER;
  if (between && is_ws(c)) return ++j->ws > DSI_JSONC_MAX_WS ? -1 : 0;
  if (between) j->ws = 0;
  for (;;) {
    switch (j->st) {
    case J_START: return c == '{' ? open_c(j, 1) : -1;
    case J_ARR_FIRST:
      if (c == ']') return close_c(j, 0);
      return value(j, c);
    case J_VALUE: return value(j, c);
    case J_OBJ_FIRST:
      if (c == '}') return close_c(j, 1);
      /* fall through */
    case J_NAME:
      if (c != '"') return -1;
      j->st = J_STR, j->key = 1;
      return 0;
    case J_COLON:
      if (c != ':') return -1;
      j->st = J_VALUE;
      return 0;
    case J_AFTER:
      if (c == ',') return j->st = top_is_object(j) ? J_NAME : J_VALUE, 0;
      if (c == '}' || c == ']') return close_c(j, c == '}');
      return -1;
    case J_STR:
      if (c == '"') return j->st = j->key ? J_COLON : J_AFTER, 0;
      if (c == '\\') return j->st = J_ESC, 0;
      return c < 0x20 ? -1 : 0;
    case J_ESC:
      if (c == 'u') return j->st = J_HEX, j->aux = 4, 0;
      if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't')
        return j->st = J_STR, 0;
      return -1;
    case J_HEX:
      if (!is_hex(c)) return -1;
      if (!--j->aux) j->st = J_STR;
      return 0;
    case J_LIT:
      if (c != (uint8_t)k_lits[j->lit][j->aux]) return -1;
      if (!k_lits[j->lit][++j->aux]) j->st = J_AFTER;
      return 0;
    case J_N_MINUS:
      if (c == '0') return j->st = J_N_ZERO, 0;
      return is_digit(c) ? (j->st = J_N_INT, 0) : -1;
    case J_N_DOT: return is_digit(c) ? (j->st = J_N_FRAC, 0) : -1;
    case J_N_E:
      if (c == '+' || c == '-') return j->st = J_N_ESIGN, 0;
      /* fall through */
    case J_N_ESIGN: return is_digit(c) ? (j->st = J_N_EXP, 0) : -1;
    case J_N_ZERO:
    case J_N_INT:
    case J_N_FRAC:
    case J_N_EXP:
      if (is_digit(c) && j->st != J_N_ZERO) return 0;
      if (c == '.' && j->st <= J_N_INT) return j->st = J_N_DOT, 0;
      if ((c == 'e' || c == 'E') && j->st != J_N_EXP) return j->st = J_N_E, 0;
      /* the number ended: the byte is what follows it */
      j->st = J_AFTER;
      if (is_ws(c)) return ++j->ws > DSI_JSONC_MAX_WS ? -1 : 0;
      continue;
    default: return -1; /* J_DONE: nothing follows the object */
    }
  }
}

int dsi_jsonc_feed(dsi_jsonc *j, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (step(j, (uint8_t)s[i])) return -1;
  return 0;
}
