// WHATWG Streams: the fragment that makes them, the globals it provides, and
// what the other files use of it.
//
// Made the first time a worker touches a stream (lazyFragment, 00-util.js):
// a body that is a string or bytes never does. Making it runs the parts
// 20- to 24-streams-*.js, each once, in that order.
//
// Takes from
//   00-util.js: lazyFragment, defineLazyGlobals
//   20-streams-queue.js: makeStreamsQueue
//   21-streams-writable.js: makeStreamsWritable
//   22-streams-readable.js: makeStreamsReadable
//   23-streams-transform.js: makeStreamsTransform
//   24-streams-text.js: makeStreamsText

let streamsMade = false;
const streamsFragment = lazyFragment(() => {
  streamsMade = true;
  const queue = makeStreamsQueue();
  const writable = makeStreamsWritable(queue);
  const readable = makeStreamsReadable(queue, writable);
  const transform = makeStreamsTransform(queue, readable, writable);
  const text = makeStreamsText(transform);
  const { ByteLengthQueuingStrategy, CountQueuingStrategy } = queue;
  const { WritableStream, WritableStreamDefaultWriter, WritableStreamDefaultController } = writable;
  const {
    ReadableStream, ReadableStreamDefaultReader, ReadableStreamDefaultController,
    ReadableByteStreamController, rsCancel, readerReadPromise, acquireReader, readerRelease,
    rsStateOf, isReadableStream, readableStreamTee, readableStreamDisturbed, readableStreamFromBytes,
    readableStreamUsed, chunkToBytes, readableStreamReadAll,
  } = readable;
  const {
    TransformStream, TransformStreamDefaultController, IdentityTransformStream, FixedLengthStream,
  } = transform;
  const { TextEncoderStream, TextDecoderStream } = text;
  return {
    ReadableStream, ReadableStreamDefaultReader, ReadableStreamDefaultController,
    ReadableByteStreamController, WritableStream, WritableStreamDefaultWriter,
    WritableStreamDefaultController, TransformStream, TransformStreamDefaultController,
    IdentityTransformStream, FixedLengthStream, ByteLengthQueuingStrategy, CountQueuingStrategy,
    TextEncoderStream, TextDecoderStream, rsCancel, readerReadPromise, acquireReader, readerRelease,
    rsStateOf, isReadableStream, readableStreamTee, readableStreamDisturbed, readableStreamFromBytes,
    readableStreamUsed, chunkToBytes, readableStreamReadAll,
  };
});
defineLazyGlobals(streamsFragment, [
  'ReadableStream', 'ReadableStreamDefaultReader', 'ReadableStreamDefaultController',
  'ReadableByteStreamController', 'WritableStream', 'WritableStreamDefaultWriter',
  'WritableStreamDefaultController', 'TransformStream', 'TransformStreamDefaultController',
  'IdentityTransformStream', 'FixedLengthStream', 'ByteLengthQueuingStrategy',
  'CountQueuingStrategy', 'TextEncoderStream', 'TextDecoderStream',
]);

// What the other files use; the stream-making ones make the fragment.
function isReadableStream(v) {
  return streamsMade && streamsFragment().isReadableStream(v);
}
function rsCancel(stream, reason) {
  return streamsFragment().rsCancel(stream, reason);
}
function readerReadPromise(reader) {
  return streamsFragment().readerReadPromise(reader);
}
function acquireReader(stream) {
  return streamsFragment().acquireReader(stream);
}
function readerRelease(reader) {
  return streamsFragment().readerRelease(reader);
}
function rsStateOf(stream) {
  return streamsFragment().rsStateOf(stream);
}
function readableStreamTee(stream) {
  return streamsFragment().readableStreamTee(stream);
}
function readableStreamDisturbed(stream) {
  return streamsFragment().readableStreamDisturbed(stream);
}
function readableStreamFromBytes(u8) {
  return streamsFragment().readableStreamFromBytes(u8);
}
function readableStreamUsed() {
  return streamsFragment().readableStreamUsed();
}
function chunkToBytes(chunk) {
  return streamsFragment().chunkToBytes(chunk);
}
function readableStreamReadAll(stream) {
  return streamsFragment().readableStreamReadAll(stream);
}
