// DOMException (WebIDL). It extends Error so that instanceof Error holds and
// V8 records a stack; name, message and code are accessors on the prototype.
//
// Takes from
//   00-util.js: toDOMString, isObjectLike, defineInterface, defineGlobal

const domExceptionLegacyCodes = {
  IndexSizeError: 1, HierarchyRequestError: 3, WrongDocumentError: 4,
  InvalidCharacterError: 5, NoModificationAllowedError: 7, NotFoundError: 8,
  NotSupportedError: 9, InUseAttributeError: 10, InvalidStateError: 11, SyntaxError: 12,
  InvalidModificationError: 13, NamespaceError: 14, InvalidAccessError: 15,
  TypeMismatchError: 17, SecurityError: 18, NetworkError: 19, AbortError: 20,
  URLMismatchError: 21, QuotaExceededError: 22, TimeoutError: 23,
  InvalidNodeTypeError: 24, DataCloneError: 25,
};

class DOMException extends Error {
  #name;
  #message;

  constructor(message = '', options = 'Error') {
    super();
    this.#message = toDOMString(message);
    if (isObjectLike(options)) {
      const name = options.name;
      this.#name = name === undefined ? 'Error' : toDOMString(name);
      if ('cause' in options) {
        Object.defineProperty(this, 'cause', {
          value: options.cause, writable: true, enumerable: false, configurable: true,
        });
      }
    } else {
      this.#name = toDOMString(options);
    }
  }

  get name() {
    return this.#name;
  }

  get message() {
    return this.#message;
  }

  get code() {
    return domExceptionLegacyCodes[this.#name] || 0;
  }
}

{
  const constants = [
    'INDEX_SIZE_ERR', 'DOMSTRING_SIZE_ERR', 'HIERARCHY_REQUEST_ERR', 'WRONG_DOCUMENT_ERR',
    'INVALID_CHARACTER_ERR', 'NO_DATA_ALLOWED_ERR', 'NO_MODIFICATION_ALLOWED_ERR',
    'NOT_FOUND_ERR', 'NOT_SUPPORTED_ERR', 'INUSE_ATTRIBUTE_ERR', 'INVALID_STATE_ERR',
    'SYNTAX_ERR', 'INVALID_MODIFICATION_ERR', 'NAMESPACE_ERR', 'INVALID_ACCESS_ERR',
    'VALIDATION_ERR', 'TYPE_MISMATCH_ERR', 'SECURITY_ERR', 'NETWORK_ERR', 'ABORT_ERR',
    'URL_MISMATCH_ERR', 'QUOTA_EXCEEDED_ERR', 'TIMEOUT_ERR', 'INVALID_NODE_TYPE_ERR',
    'DATA_CLONE_ERR',
  ];
  for (let i = 0; i < constants.length; i++) {
    const desc = { value: i + 1, enumerable: true };
    Object.defineProperty(DOMException, constants[i], desc);
    Object.defineProperty(DOMException.prototype, constants[i], desc);
  }
  defineInterface(DOMException, 'DOMException');
  defineGlobal('DOMException', DOMException);
}
