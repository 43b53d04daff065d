#ifndef CSIP_H
#define CSIP_H

/* A SIP user agent on sofia-sip's nua, behind plain C: its event loop runs on a thread of its
 * own; every call below queues a command for that thread and returns at once; events come back
 * through one callback, on that thread, with strings valid only during the call. Calls are
 * named by ids (positive integers): csip_new_call() makes one for an outgoing call, incoming
 * INVITEs get theirs from the agent. Media is the caller's business: SDP goes through as text. */

#include <stddef.h>

typedef struct csip_agent csip_agent;

typedef enum {
    CSIP_EVENT_INVITE = 1,     /* an INVITE (new, or a re-INVITE of a known call); body: its SDP */
    CSIP_EVENT_RESPONSE,       /* a response to our INVITE (status, phrase; body: its SDP) */
    CSIP_EVENT_CANCEL,         /* the caller cancelled (reason: its Reason header) */
    CSIP_EVENT_BYE,            /* the peer hung up */
    CSIP_EVENT_ACK,            /* the ACK to our final response (body: SDP, for a delayed offer) */
    CSIP_EVENT_TERMINATED,     /* the call is over; its id is no longer valid */
    CSIP_EVENT_INFO,           /* an INFO (content type and body) */
    CSIP_EVENT_BYE_RESPONSE,   /* the response to our BYE */
    CSIP_EVENT_ERROR,          /* something failed in the stack (phrase says what) */
    CSIP_EVENT_SHUTDOWN,       /* the agent has stopped */
    CSIP_EVENT_REGISTRATION,   /* a REGISTER's outcome: 2xx registered for `expires` seconds (0:
                                  unregistered), else failed (status, phrase); challenges are
                                  answered by the agent and not reported */
    CSIP_EVENT_UPDATE,         /* an UPDATE in the call (RFC 3311; body: its SDP offer, if any):
                                  answered with csip_respond_update (one at a time) */
    CSIP_EVENT_SESSION_EXPIRED,/* the stack ended the call itself (a BYE nobody asked for): the
                                  session timer ran out (RFC 4028), the peer stopped refreshing */
    CSIP_EVENT_OPTIONS_RESPONSE,/* the response to csip_options (status; `local` when the stack
                                  made it itself: the request could not be sent or was lost) */
    CSIP_EVENT_REFER,          /* a REFER in the call (RFC 3515: a transfer): body its Refer-To URI
                                  (with ?Replaces=... if it names a dialog), from_uri who referred
                                  (Referred-By, else From); answered with csip_respond_refer */
    CSIP_EVENT_REFER_RESPONSE, /* the final response to csip_refer */
    CSIP_EVENT_NOTIFY,         /* a NOTIFY of csip_refer's subscription (body: its message/sipfrag,
                                  "SIP/2.0 200 OK"); the stack answers it */
} csip_event_kind;

typedef struct {
    csip_event_kind kind;
    int status;
    const char *phrase;
    long call;
    const char *from_uri;
    const char *from_display;
    const char *to_uri;
    const char *call_id;
    const char *content_type;
    const char *body;
    const char *reason;
    int expires;
    int local;   /* the response was made by this side's stack, not received */
    long replaces; /* a new INVITE with Replaces (RFC 3891): the id of the call here it replaces
                      (one naming no call here is refused with 481 and not reported) */
} csip_event;

typedef void (*csip_event_f)(void *context, const csip_event *event);

/* Starts an agent listening at `url` ("sip:127.0.0.1:5062", "sip:*:5060;transport=udp", ...)
 * and, when `sips_url` is set with `certificate_dir` (agent.pem, cafile.pem), at that TLS url.
 * `from` is the address it calls from. Returns NULL (with `error` filled) if it cannot bind. */
csip_agent *csip_start(const char *url, const char *sips_url, const char *certificate_dir, const char *from,
                       const char *user_agent, csip_event_f callback, void *context, char *error, size_t error_size);

/* An id for a new outgoing call. */
long csip_new_call(csip_agent *agent);

/* An INVITE: a new call to `to` (with `from_display`), or a re-INVITE of a known call (`to`
 * ignored). `sdp` may be NULL (a delayed offer). */
void csip_invite(csip_agent *agent, long call, const char *to, const char *from_display, const char *sdp);

/* An INVITE for a new call placed because of a REFER in `referring` (answered 202): the stack
 * reports its progress to the referrer by NOTIFY (message/sipfrag) in that call. `replaces`,
 * if not NULL, is the Replaces header the Refer-To named (RFC 3891). */
void csip_invite_referred(csip_agent *agent, long call, const char *to, const char *from_display, const char *sdp,
                          long referring, const char *replaces);

/* Responds to the call's pending REFER (CSIP_EVENT_REFER): 202 follows it (then place the call
 * with csip_invite_referred), 400 or 403 refuse it. */
void csip_respond_refer(csip_agent *agent, long call, int status, const char *phrase);

/* Sends a REFER in the call (a transfer, RFC 3515): the peer is asked to call `refer_to`. Its
 * response comes as CSIP_EVENT_REFER_RESPONSE, the new call's progress as CSIP_EVENT_NOTIFY. */
void csip_refer(csip_agent *agent, long call, const char *refer_to);

/* As csip_refer, for an attended transfer: the Refer-To carries a Replaces naming the dialog of
 * `replacing` (this side's call with the target), so the peer's new call replaces it there. */
void csip_refer_replacing(csip_agent *agent, long call, const char *refer_to, long replacing);

/* Responds to the call's INVITE (provisional or final), with `sdp` as its body if not NULL. */
void csip_respond(csip_agent *agent, long call, int status, const char *phrase, const char *sdp);

/* Responds to the call's pending UPDATE (CSIP_EVENT_UPDATE): `status`, with `sdp` (the answer)
 * as its body if not NULL. */
void csip_respond_update(csip_agent *agent, long call, int status, const char *phrase, const char *sdp);

/* As csip_respond, with `headers` ("Name: value", CRLF between several) added if not NULL. */
void csip_respond_with_headers(csip_agent *agent, long call, int status, const char *phrase, const char *sdp,
                               const char *headers);

/* What an OPTIONS request outside a dialog is answered with from now on: `status` (200 when
 * taking calls, 503 when full or draining) and, above 299, a Retry-After of `retry_after`
 * seconds if positive. */
void csip_set_availability(csip_agent *agent, int status, int retry_after);

/* Sends an OPTIONS in the call's dialog (is the peer still there?); its response comes as
 * CSIP_EVENT_OPTIONS_RESPONSE. */
void csip_options(csip_agent *agent, long call);

/* Ends an established call. */
void csip_bye(csip_agent *agent, long call);

/* Cancels an outgoing call not answered yet. */
void csip_cancel(csip_agent *agent, long call);

/* Sends an INFO in the call. */
void csip_info(csip_agent *agent, long call, const char *content_type, const char *body);

/* Registers `aor` ("sip:alice@example.org") at `registrar` ("sip:127.0.0.1:5060"), which also
 * becomes the outbound proxy of every call, calls then coming from the AOR. Every
 * `keepalive_ms` (0: never) an OPTIONS goes to the registrar to hold a NAT's binding open
 * (RFC 5626 §4.4), and the Contact is registered again with the address and port the
 * registrar saw (received, rport) when that differs from this host's. Digest challenges
 * (401, 407) of the REGISTER and of INVITEs are answered with `user` and `password`; the stack
 * refreshes the binding before `expires` runs out. A new registration replaces the last one. */
void csip_register(csip_agent *agent, const char *aor, const char *registrar, const char *user, const char *password,
                   int expires, int keepalive_ms);

/* Removes the registration (REGISTER with expires 0). */
void csip_unregister(csip_agent *agent);

/* Parses `size` bytes as one SIP message with sofia-sip's parser (what the agent's transports
 * run on every datagram) and, for a request, reports it through `callback` as the agent reports
 * an INVITE: From, To, Call-ID, content type, body, Reason (a REFER as the agent reports one:
 * its Refer-To as the body); `phrase` is the method's name.
 * Returns 1 for a request, 0 for a response, -1 for bytes that do not parse. No agent needed:
 * for fuzzing the path from the wire to a call. */
int csip_parse(const char *data, size_t size, csip_event_f callback, void *context);

/* Stops: ends every call, closes the transports, ends the thread. Blocks until it has (call it
 * from a thread that may wait). Frees the agent. */
void csip_stop(csip_agent *agent);

#endif
