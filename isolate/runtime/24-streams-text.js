// WHATWG Encoding: TextEncoderStream and TextDecoderStream, transform
// streams around a TextEncoder's and a TextDecoder's algorithms.
//
// Takes from
//   00-util.js: toDOMString, defineInterface, bufferSourceBytes
//   15-encoding.js: TextDecoder
//   23-streams-transform.js, as the argument `transform`: TransformStream

function makeStreamsText(transform) {
const { TransformStream } = transform;


// Encoding streams -------------------------------------------------------------

class TextEncoderStream {
  #transform;

  constructor() {
    let pendingHigh = '';
    this.#transform = new TransformStream({
      transform(chunk, controller) {
        let s = pendingHigh + toDOMString(chunk);
        pendingHigh = '';
        const last = s.charCodeAt(s.length - 1);
        if (last >= 0xd800 && last <= 0xdbff) {
          // A surrogate pair may be split across chunks.
          pendingHigh = s.slice(-1);
          s = s.slice(0, -1);
        }
        if (s !== '') controller.enqueue(native.utf8Encode(s));
      },
      flush(controller) {
        if (pendingHigh !== '') controller.enqueue(new Uint8Array([0xef, 0xbf, 0xbd]));
      },
    });
  }

  get encoding() {
    return 'utf-8';
  }

  get readable() {
    return this.#transform.readable;
  }

  get writable() {
    return this.#transform.writable;
  }
}
defineInterface(TextEncoderStream, 'TextEncoderStream');

class TextDecoderStream {
  #decoder;
  #transform;

  constructor(label = 'utf-8', options = undefined) {
    const decoder = new TextDecoder(label, options);
    this.#decoder = decoder;
    this.#transform = new TransformStream({
      transform(chunk, controller) {
        if (bufferSourceBytes(chunk) === null) {
          throw new TypeError('TextDecoderStream: chunks must be ArrayBuffers or views.');
        }
        const s = decoder.decode(chunk, { stream: true });
        if (s !== '') controller.enqueue(s);
      },
      flush(controller) {
        const s = decoder.decode();
        if (s !== '') controller.enqueue(s);
      },
    });
  }

  get encoding() {
    return this.#decoder.encoding;
  }

  get fatal() {
    return this.#decoder.fatal;
  }

  get ignoreBOM() {
    return this.#decoder.ignoreBOM;
  }

  get readable() {
    return this.#transform.readable;
  }

  get writable() {
    return this.#transform.writable;
  }
}
defineInterface(TextDecoderStream, 'TextDecoderStream');

return {
  TextEncoderStream, TextDecoderStream,
};
}
