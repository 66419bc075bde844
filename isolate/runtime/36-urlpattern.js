// URLPattern (WHATWG URL Pattern Standard): a pattern per URL component,
// each compiled to a regular expression, with the standard's tokenizer,
// pattern parser and constructor string parser. The canonicalisations run
// through the URL class's setters on dummy URLs, as the standard's do
// through the URL parser.
//
// Takes from
//   00-util.js: lazyFragment, toUSVString, toDictionary, isObjectLike, defineInterface,
//     registerInspect, defineLazyGlobals
//   34-url.js: URL

// Evaluated on first use (lazyFragment, 00-util.js).
const urlPatternFragment = lazyFragment(() => {
  const SPECIAL_SCHEMES = ['ftp', 'file', 'http', 'https', 'ws', 'wss'];
  const DEFAULT_PORTS = { ftp: '21', http: '80', https: '443', ws: '80', wss: '443' };
  const COMPONENTS = ['protocol', 'username', 'password', 'hostname', 'port', 'pathname', 'search', 'hash'];
  const FULL_WILDCARD = '.*';

  // Token types
  const T_OPEN = 0, T_CLOSE = 1, T_REGEXP = 2, T_NAME = 3, T_CHAR = 4, T_ESCAPED = 5,
    T_MODIFIER = 6, T_ASTERISK = 7, T_END = 8, T_INVALID = 9;
  // Part types and modifiers
  const P_FIXED = 0, P_REGEXP = 1, P_SEGMENT = 2, P_FULL = 3;
  const M_NONE = '', M_OPTIONAL = '?', M_ZERO_OR_MORE = '*', M_ONE_OR_MORE = '+';

  const idStartRe = /[$_\p{ID_Start}]/u;
  const idPartRe = /[$_\u200C\u200D\p{ID_Continue}]/u;

  function isValidNameCodePoint(cp, first) {
    return (first ? idStartRe : idPartRe).test(cp);
  }

  function patternError(message) {
    return new TypeError(`Invalid URLPattern: ${message}`);
  }

  // Tokenizer ---------------------------------------------------------------

  function tokenize(input, strict) {
    const tokens = [];
    let index = 0;
    let next = 0;
    let cp = '';
    const seek = (at) => {
      const c = input.codePointAt(at);
      cp = String.fromCodePoint(c);
      next = at + cp.length;
    };
    const add = (type, nextPos, valuePos, valueLen) => {
      tokens.push({ type, index, value: input.slice(valuePos, valuePos + valueLen) });
      index = nextPos;
    };
    const addDefault = (type, nextPos, valuePos) => add(type, nextPos, valuePos, nextPos - valuePos);
    const error = (nextPos, valuePos) => {
      if (strict) throw patternError(`unexpected character at ${valuePos} in "${input}"`);
      addDefault(T_INVALID, nextPos, valuePos);
    };
    while (index < input.length) {
      seek(index);
      if (cp === '*') {
        addDefault(T_ASTERISK, next, index);
        continue;
      }
      if (cp === '+' || cp === '?') {
        addDefault(T_MODIFIER, next, index);
        continue;
      }
      if (cp === '\\') {
        if (next >= input.length) {
          error(next, index);
          continue;
        }
        const escapedIndex = next;
        seek(next);
        addDefault(T_ESCAPED, next, escapedIndex);
        continue;
      }
      if (cp === '{') {
        addDefault(T_OPEN, next, index);
        continue;
      }
      if (cp === '}') {
        addDefault(T_CLOSE, next, index);
        continue;
      }
      if (cp === ':') {
        let pos = next;
        const start = pos;
        while (pos < input.length) {
          seek(pos);
          if (!isValidNameCodePoint(cp, pos === start)) break;
          pos = next;
        }
        if (pos <= start) {
          error(start, index);
          continue;
        }
        add(T_NAME, pos, start, pos - start);
        continue;
      }
      if (cp === '(') {
        let depth = 1;
        let pos = next;
        const start = pos;
        let failed = false;
        while (pos < input.length) {
          seek(pos);
          if (cp.charCodeAt(0) > 0x7f || cp.length > 1) {
            error(start, index);
            failed = true;
            break;
          }
          if (pos === start && cp === '?') {
            error(start, index);
            failed = true;
            break;
          }
          if (cp === '\\') {
            if (pos === input.length - 1) {
              error(start, index);
              failed = true;
              break;
            }
            seek(next);
            if (cp.charCodeAt(0) > 0x7f || cp.length > 1) {
              error(start, index);
              failed = true;
              break;
            }
            pos = next;
            continue;
          }
          if (cp === ')') {
            depth--;
            if (depth === 0) {
              pos = next;
              break;
            }
          } else if (cp === '(') {
            depth++;
            if (pos === input.length - 1) {
              error(start, index);
              failed = true;
              break;
            }
            const save = next;
            seek(save);
            if (cp !== '?') {
              error(start, index);
              failed = true;
              break;
            }
            next = save;
          }
          pos = next;
        }
        if (failed) continue;
        if (depth !== 0) {
          error(start, index);
          continue;
        }
        const len = pos - start - 1;
        if (len === 0) {
          error(start, index);
          continue;
        }
        add(T_REGEXP, pos, start, len);
        continue;
      }
      addDefault(T_CHAR, next, index);
    }
    add(T_END, index, index, 0);
    return tokens;
  }

  // Pattern strings -------------------------------------------------------------

  function escapeRegexpString(s) {
    return s.replace(/[.+*?^${}()[\]|/\\]/g, '\\$&');
  }

  function escapePatternString(s) {
    return s.replace(/[+*?:{}()\\]/g, '\\$&');
  }

  function segmentWildcard(options) {
    return `[^${escapeRegexpString(options.delimiter)}]+?`;
  }

  function parsePatternString(input, options, encode) {
    const tokens = tokenize(input, true);
    const parts = [];
    const wildcard = segmentWildcard(options);
    let pending = '';
    let i = 0;
    let nextNumericName = 0;
    const tryConsume = (type) => {
      const t = tokens[i];
      if (t.type !== type) return null;
      i++;
      return t;
    };
    // After a name, "*" is the name's modifier, not a wildcard of its own.
    const tryConsumeRegexpOrWildcard = (nameToken) => {
      const t = tryConsume(T_REGEXP);
      return t === null && nameToken === null ? tryConsume(T_ASTERISK) : t;
    };
    const tryConsumeModifier = () => tryConsume(T_MODIFIER) || tryConsume(T_ASTERISK);
    const consumeRequired = (type) => {
      const t = tryConsume(type);
      if (t === null) throw patternError(`unexpected "${tokens[i].value}" at ${tokens[i].index} in "${input}"`);
      return t;
    };
    const consumeText = () => {
      let out = '';
      for (;;) {
        const t = tryConsume(T_CHAR) || tryConsume(T_ESCAPED);
        if (t === null) return out;
        out += t.value;
      }
    };
    const flushPending = () => {
      if (pending === '') return;
      const value = encode(pending);
      pending = '';
      parts.push({ type: P_FIXED, value, modifier: M_NONE, name: '', prefix: '', suffix: '' });
    };
    const addPart = (prefix, nameToken, regexpToken, suffix, modifierToken) => {
      let modifier = M_NONE;
      if (modifierToken !== null) modifier = modifierToken.value;
      if (nameToken === null && regexpToken === null && modifier === M_NONE) {
        pending += prefix;
        return;
      }
      flushPending();
      if (nameToken === null && regexpToken === null) {
        if (prefix === '') return;
        parts.push({ type: P_FIXED, value: encode(prefix), modifier, name: '', prefix: '', suffix: '' });
        return;
      }
      let value;
      if (regexpToken === null) value = wildcard;
      else if (regexpToken.type === T_ASTERISK) value = FULL_WILDCARD;
      else value = regexpToken.value;
      let type = P_REGEXP;
      if (value === wildcard) {
        type = P_SEGMENT;
        value = '';
      } else if (value === FULL_WILDCARD) {
        type = P_FULL;
        value = '';
      }
      let name = '';
      if (nameToken !== null) name = nameToken.value;
      else name = `${nextNumericName++}`;
      if (parts.some((p) => p.name === name)) throw patternError(`duplicate name "${name}" in "${input}"`);
      parts.push({ type, value, modifier, name, prefix: encode(prefix), suffix: encode(suffix) });
    };
    while (i < tokens.length) {
      const charToken = tryConsume(T_CHAR);
      let nameToken = tryConsume(T_NAME);
      let regexpToken = tryConsumeRegexpOrWildcard(nameToken);
      if (nameToken !== null || regexpToken !== null) {
        let prefix = charToken === null ? '' : charToken.value;
        if (prefix !== '' && prefix !== options.prefix) {
          pending += prefix;
          prefix = '';
        }
        flushPending();
        addPart(prefix, nameToken, regexpToken, '', tryConsumeModifier());
        continue;
      }
      const fixed = charToken || tryConsume(T_ESCAPED);
      if (fixed !== null) {
        pending += fixed.value;
        continue;
      }
      if (tryConsume(T_OPEN) !== null) {
        const prefix = consumeText();
        nameToken = tryConsume(T_NAME);
        regexpToken = tryConsumeRegexpOrWildcard(nameToken);
        const suffix = consumeText();
        consumeRequired(T_CLOSE);
        addPart(prefix, nameToken, regexpToken, suffix, tryConsumeModifier());
        continue;
      }
      flushPending();
      consumeRequired(T_END);
    }
    return parts;
  }

  function generateRegexp(parts, options) {
    let out = '^';
    const names = [];
    for (const part of parts) {
      if (part.type === P_FIXED) {
        if (part.modifier === M_NONE) out += escapeRegexpString(part.value);
        else out += `(?:${escapeRegexpString(part.value)})${part.modifier}`;
        continue;
      }
      names.push(part.name);
      let value = part.value;
      if (part.type === P_SEGMENT) value = segmentWildcard(options);
      else if (part.type === P_FULL) value = FULL_WILDCARD;
      if (part.prefix === '' && part.suffix === '') {
        if (part.modifier === M_NONE || part.modifier === M_OPTIONAL) out += `(${value})${part.modifier}`;
        else out += `((?:${value})${part.modifier})`;
        continue;
      }
      const prefix = escapeRegexpString(part.prefix);
      const suffix = escapeRegexpString(part.suffix);
      if (part.modifier === M_NONE || part.modifier === M_OPTIONAL) {
        out += `(?:${prefix}(${value})${suffix})${part.modifier}`;
        continue;
      }
      out += `(?:${prefix}((?:${value})(?:${suffix}${prefix}(?:${value}))*)${suffix})`;
      if (part.modifier === M_ZERO_OR_MORE) out += '?';
    }
    return [`${out}$`, names];
  }

  const asciiDigitRe = /^[0-9]/;

  function generatePatternString(parts, options) {
    let out = '';
    for (let i = 0; i < parts.length; i++) {
      const part = parts[i];
      const prev = i > 0 ? parts[i - 1] : null;
      const next = i + 1 < parts.length ? parts[i + 1] : null;
      if (part.type === P_FIXED) {
        if (part.modifier === M_NONE) out += escapePatternString(part.value);
        else out += `{${escapePatternString(part.value)}}${part.modifier}`;
        continue;
      }
      const customName = !asciiDigitRe.test(part.name);
      let grouping = part.suffix !== '' || (part.prefix !== '' && part.prefix !== options.prefix);
      if (!grouping && customName && part.type === P_SEGMENT && part.modifier === M_NONE &&
          next !== null && next.prefix === '' && next.suffix === '') {
        if (next.type === P_FIXED) {
          grouping = next.value !== '' && isValidNameCodePoint(String.fromCodePoint(next.value.codePointAt(0)), false);
        } else {
          grouping = asciiDigitRe.test(next.name);
        }
      }
      if (!grouping && part.prefix === '' && prev !== null && prev.type === P_FIXED &&
          prev.value !== '' && prev.value[prev.value.length - 1] === options.prefix) {
        grouping = true;
      }
      if (grouping) out += '{';
      out += escapePatternString(part.prefix);
      if (customName) out += `:${part.name}`;
      if (part.type === P_REGEXP) {
        out += `(${part.value})`;
      } else if (part.type === P_SEGMENT && !customName) {
        out += `(${segmentWildcard(options)})`;
      } else if (part.type === P_FULL) {
        if (!customName && (prev === null || prev.type === P_FIXED || prev.modifier !== M_NONE ||
            grouping || part.prefix !== '')) {
          out += '*';
        } else {
          out += `(${FULL_WILDCARD})`;
        }
      }
      if (part.type === P_SEGMENT && customName && part.suffix !== '' &&
          isValidNameCodePoint(String.fromCodePoint(part.suffix.codePointAt(0)), false)) {
        out += '\\';
      }
      out += escapePatternString(part.suffix);
      if (grouping) out += '}';
      out += part.modifier;
    }
    return out;
  }

  function compileComponent(input, encode, options, ignoreCase = false) {
    const parts = parsePatternString(input, options, encode);
    const [source, names] = generateRegexp(parts, options);
    let regexp;
    try {
      regexp = new RegExp(source, ignoreCase ? 'ui' : 'u');
    } catch (err) {
      throw patternError(`"${input}" is not a valid regular expression: ${err.message}`);
    }
    return {
      pattern: generatePatternString(parts, options),
      regexp,
      names,
      hasRegExpGroups: parts.some((p) => p.type === P_REGEXP),
    };
  }

  const DEFAULT_OPTIONS = { delimiter: '', prefix: '' };
  const HOSTNAME_OPTIONS = { delimiter: '.', prefix: '' };
  const PATHNAME_OPTIONS = { delimiter: '/', prefix: '/' };

  function matchesSpecialScheme(component) {
    return SPECIAL_SCHEMES.some((s) => component.regexp.test(s));
  }

  // Canonicalisation (encoding callbacks), on the standard's dummy URL.

  const DUMMY_URL = 'https://dummy.invalid/';

  function canonicalizeProtocol(value) {
    if (value === '') return value;
    let url;
    try {
      url = new URL(`${value}://dummy.invalid/`);
    } catch {
      throw patternError(`invalid protocol "${value}"`);
    }
    return url.protocol.slice(0, -1);
  }

  function canonicalizeUsername(value) {
    if (value === '') return value;
    const url = new URL(DUMMY_URL);
    url.username = value;
    return url.username;
  }

  function canonicalizePassword(value) {
    if (value === '') return value;
    const url = new URL(DUMMY_URL);
    url.password = value;
    return url.password;
  }

  // The hostname setter ignores what it cannot parse: two dummies with
  // different hosts tell a failure (both unchanged) from a success.
  function canonicalizeHostname(value) {
    if (value === '') return value;
    const a = new URL('https://a.invalid/');
    const b = new URL('https://b.invalid/');
    a.hostname = value;
    b.hostname = value;
    if (a.hostname !== b.hostname) throw patternError(`invalid hostname "${value}"`);
    return a.hostname;
  }

  function canonicalizeIPv6Hostname(value) {
    let out = '';
    for (const c of value) {
      if (!/^[0-9A-Fa-f[\]:]$/.test(c)) throw patternError(`invalid IPv6 hostname "${value}"`);
      out += c.toLowerCase();
    }
    return out;
  }

  // The dummy URL's scheme is https unless a protocol is given.
  function canonicalizePort(value, protocol = 'https') {
    if (value === '') return value;
    // The port state of the URL parser with a state override: leading
    // digits, whatever follows ignored; none at all is a failure.
    const digits = /^[0-9]*/.exec(value.replace(/[\t\n\r]/g, ''))[0];
    if (digits === '') throw patternError(`invalid port "${value}"`);
    const n = Number(digits);
    if (n > 65535) throw patternError(`invalid port "${value}"`);
    const port = `${n}`;
    if (DEFAULT_PORTS[protocol] === port) return '';
    return port;
  }

  function canonicalizePathname(value) {
    if (value === '') return value;
    const leadingSlash = value[0] === '/';
    const url = new URL(DUMMY_URL);
    url.pathname = leadingSlash ? value : `/-${value}`;
    return leadingSlash ? url.pathname : url.pathname.slice(2);
  }

  function canonicalizeOpaquePathname(value) {
    if (value === '') return value;
    let url;
    try {
      url = new URL(`fake:${value}`);
    } catch {
      throw patternError(`invalid pathname "${value}"`);
    }
    return url.pathname;
  }

  function canonicalizeSearch(value) {
    if (value === '') return value;
    const url = new URL(DUMMY_URL);
    url.search = `?${value}`;
    return url.search.slice(1);
  }

  function canonicalizeHash(value) {
    if (value === '') return value;
    const url = new URL(DUMMY_URL);
    url.hash = `#${value}`;
    return url.hash.slice(1);
  }

  // Processing a URLPatternInit ---------------------------------------------------

  function isAbsolutePathname(input, type) {
    if (input === '') return false;
    if (input[0] === '/') return true;
    if (type === 'url') return false;
    if (input.length < 2) return false;
    return (input[0] === '\\' || input[0] === '{') && input[1] === '/';
  }

  function processBaseString(input, type) {
    return type === 'pattern' ? escapePatternString(input) : input;
  }

  function processInit(init, type, defaults) {
    const result = { ...defaults };
    let base = null;
    const has = (k) => init[k] !== undefined;
    if (has('baseURL')) {
      try {
        base = new URL(toUSVString(init.baseURL));
      } catch {
        throw patternError(`invalid baseURL "${init.baseURL}"`);
      }
      if (!has('protocol')) result.protocol = processBaseString(base.protocol.slice(0, -1), type);
      if (type !== 'pattern' && !has('protocol') && !has('hostname') && !has('port') && !has('username')) {
        result.username = processBaseString(base.username, type);
      }
      if (type !== 'pattern' && !has('protocol') && !has('hostname') && !has('port') &&
          !has('username') && !has('password')) {
        result.password = processBaseString(base.password, type);
      }
      if (!has('protocol') && !has('hostname')) result.hostname = processBaseString(base.hostname, type);
      if (!has('protocol') && !has('hostname') && !has('port')) result.port = base.port;
      if (!has('protocol') && !has('hostname') && !has('port') && !has('pathname')) {
        result.pathname = processBaseString(base.pathname, type);
      }
      if (!has('protocol') && !has('hostname') && !has('port') && !has('pathname') && !has('search')) {
        result.search = processBaseString(base.search.slice(1), type);
      }
      if (!has('protocol') && !has('hostname') && !has('port') && !has('pathname') && !has('search') &&
          !has('hash')) {
        result.hash = processBaseString(base.hash.slice(1), type);
      }
    }
    const pattern = type === 'pattern';
    if (has('protocol')) {
      const v = toUSVString(init.protocol).replace(/:$/, '');
      result.protocol = pattern ? v : canonicalizeProtocol(v);
    }
    if (has('username')) {
      const v = toUSVString(init.username);
      result.username = pattern ? v : canonicalizeUsername(v);
    }
    if (has('password')) {
      const v = toUSVString(init.password);
      result.password = pattern ? v : canonicalizePassword(v);
    }
    if (has('hostname')) {
      const v = toUSVString(init.hostname);
      result.hostname = pattern ? v : canonicalizeHostname(v);
    }
    if (has('port')) {
      const v = toUSVString(init.port);
      result.port = pattern ? v : canonicalizePort(v, result.protocol === undefined ? '' : result.protocol);
    }
    if (has('pathname')) {
      let v = toUSVString(init.pathname);
      if (base !== null && !isOpaqueURL(base) && !isAbsolutePathname(v, type)) {
        const basePath = processBaseString(base.pathname, type);
        const slash = basePath.lastIndexOf('/');
        if (slash >= 0) v = basePath.slice(0, slash + 1) + v;
      }
      if (!pattern) {
        const proto = result.protocol;
        v = proto === undefined || proto === '' || SPECIAL_SCHEMES.includes(proto)
          ? canonicalizePathname(v) : canonicalizeOpaquePathname(v);
      }
      result.pathname = v;
    }
    if (has('search')) {
      const v = toUSVString(init.search).replace(/^\?/, '');
      result.search = pattern ? v : canonicalizeSearch(v);
    }
    if (has('hash')) {
      const v = toUSVString(init.hash).replace(/^#/, '');
      result.hash = pattern ? v : canonicalizeHash(v);
    }
    return result;
  }

  // A URL whose path is opaque ("mailto:x") has no "/" after its scheme.
  function isOpaqueURL(url) {
    return url.href[url.protocol.length] !== '/';
  }

  // The constructor string parser ------------------------------------------------

  function parseConstructorString(input) {
    const tokens = tokenize(input, false);
    const result = {};
    let componentStart = 0;
    let ti = 0;
    let increment = 1;
    let groupDepth = 0;
    let ipv6Depth = 0;
    let protocolIsSpecial = false;
    let state = 'init';
    const safeToken = (i) => (i < tokens.length ? tokens[i] : tokens[tokens.length - 1]);
    const isChar = (i, value) => {
      const t = safeToken(i);
      return t.value === value && (t.type === T_CHAR || t.type === T_ESCAPED || t.type === T_INVALID);
    };
    const isSearchPrefix = () => {
      if (isChar(ti, '?')) return true;
      if (tokens[ti].value !== '?') return false;
      if (ti - 1 < 0) return true;
      const prev = safeToken(ti - 1);
      return !(prev.type === T_NAME || prev.type === T_REGEXP || prev.type === T_CLOSE || prev.type === T_ASTERISK);
    };
    const componentString = () => {
      const t = tokens[ti];
      const start = safeToken(componentStart);
      return input.slice(start.index, t.index);
    };
    const rewind = () => {
      ti = componentStart;
      increment = 0;
    };
    const changeState = (next, skip) => {
      if (state !== 'init' && state !== 'authority' && state !== 'done') result[state] = componentString();
      if (state !== 'init' && next !== 'done') {
        const early = ['protocol', 'authority', 'username', 'password'];
        if (early.includes(state) && ['port', 'pathname', 'search', 'hash'].includes(next) &&
            result.hostname === undefined) {
          result.hostname = '';
        }
        if ([...early, 'hostname', 'port'].includes(state) && (next === 'search' || next === 'hash') &&
            result.pathname === undefined) {
          result.pathname = protocolIsSpecial ? '/' : '';
        }
        if ([...early, 'hostname', 'port', 'pathname'].includes(state) && next === 'hash' &&
            result.search === undefined) {
          result.search = '';
        }
      }
      state = next;
      ti += skip;
      componentStart = ti;
      increment = 0;
    };
    while (ti < tokens.length) {
      increment = 1;
      const token = tokens[ti];
      if (token.type === T_END) {
        if (state === 'init') {
          rewind();
          if (isChar(ti, '#')) changeState('hash', 1);
          else if (isSearchPrefix()) changeState('search', 1);
          else changeState('pathname', 0);
          ti += increment;
          continue;
        }
        if (state === 'authority') {
          rewind();
          state = 'hostname';
          ti += increment;
          continue;
        }
        changeState('done', 0);
        break;
      }
      if (token.type === T_OPEN) {
        groupDepth++;
        ti += increment;
        continue;
      }
      if (groupDepth > 0) {
        if (token.type === T_CLOSE) {
          groupDepth--;
        } else {
          ti += increment;
          continue;
        }
      }
      switch (state) {
        case 'init':
          if (isChar(ti, ':')) {
            rewind();
            state = 'protocol';
          }
          break;
        case 'protocol':
          if (isChar(ti, ':')) {
            const proto = compileComponent(componentString(), canonicalizeProtocol, DEFAULT_OPTIONS);
            protocolIsSpecial = matchesSpecialScheme(proto);
            let next = 'pathname';
            let skip = 1;
            if (isChar(ti + 1, '/') && isChar(ti + 2, '/')) {
              next = 'authority';
              skip = 3;
            } else if (protocolIsSpecial) {
              next = 'authority';
            }
            changeState(next, skip);
          }
          break;
        case 'authority':
          if (isChar(ti, '@')) {
            rewind();
            state = 'username';
          } else if (isChar(ti, '/') || isSearchPrefix() || isChar(ti, '#')) {
            rewind();
            state = 'hostname';
          }
          break;
        case 'username':
          if (isChar(ti, ':')) changeState('password', 1);
          else if (isChar(ti, '@')) changeState('hostname', 1);
          break;
        case 'password':
          if (isChar(ti, '@')) changeState('hostname', 1);
          break;
        case 'hostname':
          if (isChar(ti, '[')) ipv6Depth++;
          else if (isChar(ti, ']')) ipv6Depth--;
          else if (isChar(ti, ':') && ipv6Depth === 0) changeState('port', 1);
          else if (isChar(ti, '/')) changeState('pathname', 0);
          else if (isSearchPrefix()) changeState('search', 1);
          else if (isChar(ti, '#')) changeState('hash', 1);
          break;
        case 'port':
          if (isChar(ti, '/')) changeState('pathname', 0);
          else if (isSearchPrefix()) changeState('search', 1);
          else if (isChar(ti, '#')) changeState('hash', 1);
          break;
        case 'pathname':
          if (isSearchPrefix()) changeState('search', 1);
          else if (isChar(ti, '#')) changeState('hash', 1);
          break;
        case 'search':
          if (isChar(ti, '#')) changeState('hash', 1);
          break;
        default:
          break;
      }
      ti += increment;
    }
    if (result.hostname !== undefined && result.port === undefined) result.port = '';
    return result;
  }

  // URLPattern ---------------------------------------------------------------------

  function isIPv6Pattern(s) {
    if (s.length < 2) return false;
    return s[0] === '[' || ((s[0] === '{' || s[0] === '\\') && s[1] === '[');
  }

  function patternOptions(options) {
    const opts = toDictionary(options, "Failed to construct 'URLPattern': The 'options' argument");
    return { ignoreCase: opts !== null && !!opts.ignoreCase };
  }

  function initFromInput(input, what) {
    if (!isObjectLike(input)) {
      throw new TypeError(`Failed to execute '${what}' on 'URLPattern': the input is neither a string nor a URLPatternInit.`);
    }
    const init = {};
    for (const k of [...COMPONENTS, 'baseURL']) {
      const v = input[k];
      if (v !== undefined) init[k] = toUSVString(v);
    }
    return init;
  }

  class URLPattern {
    #components;

    constructor(input = undefined, baseURL = undefined, options = undefined) {
      let init;
      let opts;
      if (typeof input === 'string' || (input !== undefined && !isObjectLike(input))) {
        const s = toUSVString(input);
        if (isObjectLike(baseURL)) {
          opts = baseURL;
          baseURL = undefined;
        } else {
          opts = options;
        }
        init = parseConstructorString(s);
        if (baseURL === undefined && init.protocol === undefined) {
          throw patternError(`relative pattern "${s}" without a baseURL`);
        }
        if (baseURL !== undefined) init.baseURL = toUSVString(baseURL);
      } else {
        if (baseURL !== undefined && !isObjectLike(baseURL)) {
          throw new TypeError("Failed to construct 'URLPattern': a baseURL is given with a URLPatternInit.");
        }
        opts = isObjectLike(baseURL) ? baseURL : options;
        init = input === undefined || input === null ? {} : initFromInput(input, 'constructor');
      }
      const { ignoreCase } = patternOptions(opts);
      const processed = processInit(init, 'pattern', {});
      for (const k of COMPONENTS) if (processed[k] === undefined) processed[k] = '*';
      if (SPECIAL_SCHEMES.includes(processed.protocol) && processed.port === DEFAULT_PORTS[processed.protocol]) {
        processed.port = '';
      }
      const c = {};
      c.protocol = compileComponent(processed.protocol, canonicalizeProtocol, DEFAULT_OPTIONS);
      c.username = compileComponent(processed.username, canonicalizeUsername, DEFAULT_OPTIONS);
      c.password = compileComponent(processed.password, canonicalizePassword, DEFAULT_OPTIONS);
      c.hostname = isIPv6Pattern(processed.hostname)
        ? compileComponent(processed.hostname, canonicalizeIPv6Hostname, HOSTNAME_OPTIONS)
        : compileComponent(processed.hostname, canonicalizeHostname, HOSTNAME_OPTIONS);
      c.port = compileComponent(processed.port, (v) => canonicalizePort(v), DEFAULT_OPTIONS);
      c.pathname = matchesSpecialScheme(c.protocol)
        ? compileComponent(processed.pathname, canonicalizePathname, PATHNAME_OPTIONS, ignoreCase)
        : compileComponent(processed.pathname, canonicalizeOpaquePathname, DEFAULT_OPTIONS, ignoreCase);
      c.search = compileComponent(processed.search, canonicalizeSearch, DEFAULT_OPTIONS, ignoreCase);
      c.hash = compileComponent(processed.hash, canonicalizeHash, DEFAULT_OPTIONS, ignoreCase);
      this.#components = c;
    }

    test(input = undefined, baseURL = undefined) {
      return this.#match(input, baseURL, 'test') !== null;
    }

    exec(input = undefined, baseURL = undefined) {
      return this.#match(input, baseURL, 'exec');
    }

    #match(input, baseURL, what) {
      const values = {
        protocol: '', username: '', password: '', hostname: '', port: '', pathname: '', search: '', hash: '',
      };
      const inputs = [];
      if (input === undefined) input = {};
      if (isObjectLike(input) && !(input instanceof URL)) {
        if (baseURL !== undefined) {
          throw new TypeError(`Failed to execute '${what}' on 'URLPattern': a baseURL is given with a URLPatternInit.`);
        }
        inputs.push(input);
        try {
          Object.assign(values, processInit(initFromInput(input, what), 'url', values));
        } catch {
          return null;
        }
      } else {
        const s = toUSVString(input);
        inputs.push(s);
        let url;
        try {
          if (baseURL !== undefined) {
            const b = toUSVString(baseURL);
            inputs.push(b);
            url = new URL(s, b);
          } else {
            url = new URL(s);
          }
        } catch {
          return null;
        }
        values.protocol = url.protocol.slice(0, -1);
        values.username = url.username;
        values.password = url.password;
        values.hostname = url.hostname;
        values.port = url.port;
        values.pathname = url.pathname;
        values.search = url.search.slice(1);
        values.hash = url.hash.slice(1);
      }
      const result = { inputs };
      for (const k of COMPONENTS) {
        const comp = this.#components[k];
        const m = comp.regexp.exec(values[k]);
        if (m === null) return null;
        const groups = {};
        for (let i = 0; i < comp.names.length; i++) groups[comp.names[i]] = m[i + 1];
        result[k] = { input: values[k], groups };
      }
      return result;
    }

    get protocol() { return this.#components.protocol.pattern; }
    get username() { return this.#components.username.pattern; }
    get password() { return this.#components.password.pattern; }
    get hostname() { return this.#components.hostname.pattern; }
    get port() { return this.#components.port.pattern; }
    get pathname() { return this.#components.pathname.pattern; }
    get search() { return this.#components.search.pattern; }
    get hash() { return this.#components.hash.pattern; }

    get hasRegExpGroups() {
      return COMPONENTS.some((k) => this.#components[k].hasRegExpGroups);
    }
  }
  defineInterface(URLPattern, 'URLPattern');
  registerInspect(URLPattern, (p) => {
    const shown = {};
    for (const k of COMPONENTS) shown[k] = p[k];
    return shown;
  });
  return { URLPattern };
});
defineLazyGlobals(urlPatternFragment, ['URLPattern']);
