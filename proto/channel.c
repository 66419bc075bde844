/*
 * channel.c: frames over a libuv pipe.
 *
 * Lifetime: the channel is open from proto_channel_open_fd()/start() until
 * the first close (asked for, end of stream, read or write error, malformed
 * input). Closing stops reading at once; on_close runs from the loop after
 * libuv released the handle, so the owner may free the struct inside it.
 *
 * ch->closing doubles as the close reason, because the struct has no other
 * field for it: 0 = open, CLOSING_CLEAN = closed with reason 0, any negative
 * value = closed with that error.
 */
#include "proto.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"

#define CLOSING_CLEAN 1
#define READ_CHUNK (64 * 1024)

/* One frame on its way out: the request and the bytes it writes, one allocation. */
typedef struct channel_write {
  uv_write_t req;
  uint8_t bytes[]; /* header + payload */
} channel_write;

static void channel_close_with(proto_channel *ch, int reason);

static proto_channel *channel_of(uv_handle_t *handle) {
  return container_of((uv_pipe_t *)handle, proto_channel, pipe);
}

/*
 * Reads land in one buffer per thread and are copied into the decoder right
 * away: libuv hands each buffer to the read callback before asking for the
 * next one, so a channel never finds another's bytes in it.
 */
static void channel_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf) {
  static _Thread_local char chunk[READ_CHUNK];
  (void)handle;
  (void)suggested;
  *buf = uv_buf_init(chunk, sizeof chunk);
}

static void channel_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf) {
  proto_channel *ch = channel_of((uv_handle_t *)stream);
  if (nread < 0) {
    channel_close_with(ch, (int)nread);
    return;
  }
  if (nread == 0 || ch->closing) return;

  int rc = proto_decoder_feed(&ch->decoder, buf->base, (size_t)nread);
  proto_frame frame;
  /*
   * on_frame may close the channel; close only defers the teardown to the
   * loop, so ch and the decoder stay valid here and we just stop delivering.
   */
  while (rc == 0 && !ch->closing) {
    rc = proto_decoder_next(&ch->decoder, &frame);
    if (rc <= 0) break;
    ch->on_frame(ch, &frame);
    rc = 0;
  }
  if (rc < 0 && !ch->closing) channel_close_with(ch, rc);
}

static void channel_closed(uv_handle_t *handle) {
  proto_channel *ch = channel_of(handle);
  int reason = ch->closing == CLOSING_CLEAN ? 0 : ch->closing;
  proto_decoder_free(&ch->decoder);
  if (ch->on_close != NULL) ch->on_close(ch, reason);
}

static void channel_close_with(proto_channel *ch, int reason) {
  if (ch->closing) return;
  ch->closing = reason == 0 ? CLOSING_CLEAN : reason;
  /* Closing cancels queued writes; their callbacks free them (UV_ECANCELED). */
  uv_read_stop((uv_stream_t *)&ch->pipe);
  uv_close((uv_handle_t *)&ch->pipe, channel_closed);
}

static void channel_setup(proto_channel *ch, proto_frame_cb on_frame, proto_close_cb on_close,
                          void *data) {
  proto_decoder_init(&ch->decoder, PROTO_MAX_PAYLOAD);
  ch->on_frame = on_frame;
  ch->on_close = on_close;
  ch->data = data;
  ch->next_id = 0;
  ch->closing = 0;
}

int proto_channel_start(proto_channel *ch, proto_frame_cb on_frame, proto_close_cb on_close,
                        void *data) {
  if (on_frame == NULL) return UV_EINVAL;
  channel_setup(ch, on_frame, on_close, data);
  int rc = uv_read_start((uv_stream_t *)&ch->pipe, channel_alloc, channel_read);
  if (rc < 0) proto_decoder_free(&ch->decoder);
  return rc;
}

static void channel_open_failed(uv_handle_t *handle) { (void)handle; }

int proto_channel_open_fd(proto_channel *ch, uv_loop_t *loop, int fd, proto_frame_cb on_frame,
                          proto_close_cb on_close, void *data) {
  if (on_frame == NULL || fd < 0) return UV_EINVAL;
  /*
   * Reject a dead fd before the handle joins the loop: once initialised it
   * can only leave through uv_close, and then the caller could not free the
   * struct right after our error return.
   */
  int mode = fcntl(fd, F_GETFL);
  if (mode < 0) return UV_EBADF;
  if ((mode & O_ACCMODE) == O_WRONLY) return UV_EINVAL;

  int rc = uv_pipe_init(loop, &ch->pipe, 0);
  if (rc < 0) return rc;
  rc = uv_pipe_open(&ch->pipe, fd);
  if (rc == 0) rc = proto_channel_start(ch, on_frame, on_close, data);
  if (rc < 0) {
    /*
     * Only left for odd cases (the fd is already watched by this loop): the
     * handle is released on the next loop turn, without on_close.
     */
    ch->closing = CLOSING_CLEAN;
    uv_close((uv_handle_t *)&ch->pipe, channel_open_failed);
  }
  return rc;
}

static void channel_written(uv_write_t *req, int status) {
  channel_write *w = container_of(req, channel_write, req);
  /* A cancelled write means the channel is already closing: leave it alone. */
  if (status < 0 && status != UV_ECANCELED) {
    proto_channel *ch = channel_of((uv_handle_t *)req->handle);
    channel_close_with(ch, status);
  }
  free(w);
}

int proto_channel_send(proto_channel *ch, uint8_t type, uint32_t id, const void *payload,
                       size_t length) {
  if (ch->closing) return UV_EPIPE;
  if (length > PROTO_MAX_PAYLOAD) return PROTO_ETOOBIG;
  if (length > 0 && payload == NULL) return UV_EINVAL;

  channel_write *w = xmalloc(sizeof *w + PROTO_HEADER_SIZE + length);
  int rc = proto_encode_header(w->bytes, type, id, (uint32_t)length);
  if (rc < 0) {
    free(w);
    return rc;
  }
  if (length > 0) memcpy(w->bytes + PROTO_HEADER_SIZE, payload, length);

  uv_buf_t buf = uv_buf_init((char *)w->bytes, (unsigned int)(PROTO_HEADER_SIZE + length));
  rc = uv_write(&w->req, (uv_stream_t *)&ch->pipe, &buf, 1, channel_written);
  if (rc < 0) free(w);
  return rc;
}

uint32_t proto_channel_request_id(proto_channel *ch) {
  /* 0 marks one-way messages, so it is skipped when the counter wraps. */
  if (++ch->next_id == 0) ch->next_id = 1;
  return ch->next_id;
}

void proto_channel_close(proto_channel *ch) { channel_close_with(ch, 0); }
