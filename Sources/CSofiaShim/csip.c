/* The C shim over sofia-sip's nua: see include/csip.h. Everything that touches sofia-sip runs
 * on the agent's own thread (the one that made its su_root and runs it); other threads only
 * queue commands and wake that thread through a pipe. */

#define _GNU_SOURCE
#include "csip.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NUA_MAGIC_T struct csip_agent
#define NUA_HMAGIC_T void
#define SU_ROOT_MAGIC_T struct csip_agent
#define SU_WAKEUP_ARG_T struct csip_agent

#include <sofia-sip/msg.h>
#include <sofia-sip/nta.h>
/* The flag nta sets on a response it made itself (a transport error's 503, a timeout's 408);
 * its header (nta_internal.h) is not installed. */
#ifndef NTA_INTERNAL_MSG
#define NTA_INTERNAL_MSG (1 << 15)
#endif
#include <sofia-sip/nua.h>
#include <sofia-sip/nua_tag.h>
#include <sofia-sip/sip_header.h>
#include <sofia-sip/sip_status.h>
#include <sofia-sip/su_log.h>
#include <sofia-sip/su_tag.h>
#include <sofia-sip/su_wait.h>
#include <sofia-sip/url.h>

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

enum command_op { OP_INVITE, OP_RESPOND, OP_RESPOND_UPDATE, OP_RESPOND_REFER, OP_REFER, OP_OPTIONS, OP_BYE, OP_CANCEL, OP_INFO, OP_REGISTER, OP_UNREGISTER, OP_SHUTDOWN };

struct command {
    enum command_op op;
    long call;
    int status;
    char *a, *b, *c, *d;
    struct command *next;
};

struct call_entry {
    long id;
    nua_handle_t *handle;
    int auth_tries;  /* digest challenges answered for its INVITE */
    int tls;         /* its dialog runs over TLS */
    int bye_sent;    /* this side asked for its BYE or CANCEL, or the peer sent its BYE: a session
                        the stack ends otherwise was ended by it (an expired session timer, a
                        refresh the peer refused) */
    int update_saved;                 /* an UPDATE waits for its answer in `update` */
    nua_saved_event_t update[1];
    int refer_saved;                  /* a REFER waits for its answer in `refer` */
    nua_saved_event_t refer[1];
    sip_event_t *refer_event;         /* the last REFER's Event (its subscription), in the handle's home:
                                         a call placed for it reports its progress there by NOTIFY */
    struct sockaddr_storage flow;     /* a peer whose INVITE came through a proxy that stays out of the
                                         dialog, over UDP: where its ACK and BYE will come from */
    socklen_t flow_length;            /* 0: none */
};

/* The registration's handle is bound to this id (calls' ids are positive). */
#define REGISTRATION_ID (-1L)

struct csip_agent {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t ready_cond;
    int ready;            /* 1: running, -1: failed to start */
    char error[256];

    char *url, *sips_url, *certificate_dir, *from, *user_agent;
    csip_event_f callback;
    void *context;

    int wake[2];
    struct command *head, *tail;
    long next_id;
    /* What an OPTIONS outside a dialog is answered with (csip_set_availability; the lock). */
    int options_status, options_retry_after;
    /* The registration's keep-alive interval (csip_register; the lock). */
    int keepalive_ms;

    /* The agent's thread only. */
    su_home_t home[1];
    su_root_t *root;
    nua_t *nua;
    su_wait_t wait[1];
    struct call_entry *calls;
    size_t call_count, call_capacity;
    int stopping;
    /* The registration: its handle, account and credentials, and the challenges answered
     * since its last success. */
    nua_handle_t *registration;
    char *reg_user, *reg_password;
    int reg_auth_tries;
    /* With TLS: the Contact of dialogs over it, `<sip:HOST:PORT;transport=tls>` (sofia would say
     * `sips:`, which many phones cannot route to). */
    char *tls_contact;
    /* Dialog flows kept open (see open_flow): the timer, and the UDP sockets sofia listens on
     * (found once per family; -2 not looked for yet, -1 none). */
    su_timer_t *flow_timer;
    int udp_fd4, udp_fd6;
};

static char *copy(const char *text) { return text ? strdup(text) : NULL; }

/* MARK: calls by id (the agent's thread) */

static struct call_entry *call_entry(csip_agent *agent, long id) {
    for (size_t i = 0; i < agent->call_count; i++)
        if (agent->calls[i].id == id) return &agent->calls[i];
    return NULL;
}

static nua_handle_t *call_handle(csip_agent *agent, long id) {
    struct call_entry *entry = call_entry(agent, id);
    return entry ? entry->handle : NULL;
}

static void add_call(csip_agent *agent, long id, nua_handle_t *handle) {
    if (agent->call_count == agent->call_capacity) {
        size_t capacity = agent->call_capacity ? agent->call_capacity * 2 : 16;
        struct call_entry *grown = realloc(agent->calls, capacity * sizeof *grown);
        if (!grown) return;
        agent->calls = grown;
        agent->call_capacity = capacity;
    }
    memset(&agent->calls[agent->call_count], 0, sizeof agent->calls[agent->call_count]);
    agent->calls[agent->call_count].id = id;
    agent->calls[agent->call_count].handle = handle;
    agent->call_count++;
}

static void remove_call(csip_agent *agent, long id) {
    for (size_t i = 0; i < agent->call_count; i++) {
        if (agent->calls[i].id == id) {
            if (agent->calls[i].update_saved) nua_destroy_event(agent->calls[i].update);
            if (agent->calls[i].refer_saved) nua_destroy_event(agent->calls[i].refer);
            agent->calls[i] = agent->calls[--agent->call_count];
            return;
        }
    }
}

static long new_id(csip_agent *agent) {
    return __atomic_add_fetch(&agent->next_id, 1, __ATOMIC_RELAXED);
}

/* MARK: events */

static void report_with(csip_event_f callback, void *context, csip_event const *prefilled, sip_t const *sip) {
    char from_uri[512] = "", to_uri[512] = "", reason[256] = "", content_type[128] = "";
    char *body = NULL;
    csip_event event = *prefilled;
    if (sip) {
        if (sip->sip_from) {
            url_e(from_uri, sizeof from_uri, sip->sip_from->a_url);
            from_uri[sizeof from_uri - 1] = 0;
            event.from_uri = from_uri;
            event.from_display = sip->sip_from->a_display;
        }
        if (sip->sip_to) {
            url_e(to_uri, sizeof to_uri, sip->sip_to->a_url);
            to_uri[sizeof to_uri - 1] = 0;
            event.to_uri = to_uri;
        }
        if (sip->sip_call_id) event.call_id = sip->sip_call_id->i_id;
        if (sip->sip_content_type && sip->sip_content_type->c_type) {
            snprintf(content_type, sizeof content_type, "%s", sip->sip_content_type->c_type);
            event.content_type = content_type;
        }
        if (sip->sip_payload && sip->sip_payload->pl_data && sip->sip_payload->pl_len > 0) {
            body = malloc(sip->sip_payload->pl_len + 1);
            if (body) {
                memcpy(body, sip->sip_payload->pl_data, sip->sip_payload->pl_len);
                body[sip->sip_payload->pl_len] = 0;
                event.body = body;
            }
        }
        if (sip->sip_reason) {
            snprintf(reason, sizeof reason, "%s;cause=%s;text=%s", sip->sip_reason->re_protocol ? sip->sip_reason->re_protocol : "",
                     sip->sip_reason->re_cause ? sip->sip_reason->re_cause : "", sip->sip_reason->re_text ? sip->sip_reason->re_text : "");
            event.reason = reason;
        }
    }
    callback(context, &event);
    free(body);
}

static void report(csip_event_f callback, void *context, csip_event_kind kind, int status, const char *phrase, long call,
                   sip_t const *sip) {
    csip_event event = { .kind = kind, .status = status, .phrase = phrase, .call = call };
    report_with(callback, context, &event, sip);
}

/* A REFER as the node hears it: its Refer-To as the body (with ?Replaces=... if it names a
 * dialog), who referred (Referred-By, else From) as from_uri. */
static void report_refer(csip_event_f callback, void *context, int status, const char *phrase, long call, sip_t const *sip) {
    char refer_to[1024] = "", by[512] = "";
    csip_event reported = { .kind = CSIP_EVENT_REFER, .status = status, .phrase = phrase, .call = call };
    if (sip && sip->sip_refer_to) {
        url_e(refer_to, sizeof refer_to, sip->sip_refer_to->r_url);
        refer_to[sizeof refer_to - 1] = 0;
        reported.body = refer_to;
    }
    if (sip && (sip->sip_referred_by || sip->sip_from)) {
        url_e(by, sizeof by, sip->sip_referred_by ? sip->sip_referred_by->b_url : sip->sip_from->a_url);
        by[sizeof by - 1] = 0;
        reported.from_uri = by;
    }
    callback(context, &reported);
}

static void emit(csip_agent *agent, csip_event_kind kind, int status, const char *phrase, long call, sip_t const *sip) {
    report(agent->callback, agent->context, kind, status, phrase, call, sip);
}

/* Answers a 401/407 challenge with the registration's credentials; 0 if there are none or the
 * challenge names no realm. */
static int answer_challenge(csip_agent *agent, nua_handle_t *nh, sip_t const *sip) {
    if (!agent->reg_user || !agent->reg_password || !sip) return 0;
    msg_auth_t const *challenge = sip->sip_www_authenticate ? sip->sip_www_authenticate : sip->sip_proxy_authenticate;
    if (!challenge || !challenge->au_scheme) return 0;
    char const *realm = msg_params_find(challenge->au_params, "realm=");
    if (!realm) return 0;
    /* "Digest:\"realm\":user:password", the realm quoted as the challenge gave it. */
    size_t size = strlen(challenge->au_scheme) + strlen(realm) + strlen(agent->reg_user) + strlen(agent->reg_password) + 8;
    char *credentials = malloc(size);
    if (!credentials) return 0;
    snprintf(credentials, size, "%s:%s%s%s:%s:%s", challenge->au_scheme, realm[0] == '"' ? "" : "\"", realm,
             realm[0] == '"' ? "" : "\"", agent->reg_user, agent->reg_password);
    nua_authenticate(nh, NUTAG_AUTH(credentials), TAG_END());
    free(credentials);
    return 1;
}

static void registration_result(csip_agent *agent, int status, char const *phrase, sip_t const *sip, int unregistering) {
    csip_event event = { .kind = CSIP_EVENT_REGISTRATION, .status = status, .phrase = phrase, .call = REGISTRATION_ID };
    if (status >= 200 && status < 300 && !unregistering) {
        /* The expiry granted: our contact's, else the response's Expires. */
        event.expires = sip && sip->sip_expires ? (int)sip->sip_expires->ex_delta : 0;
        if (sip && sip->sip_contact && sip->sip_contact->m_expires) event.expires = atoi(sip->sip_contact->m_expires);
        if (event.expires == 0) event.expires = 1;
    }
    agent->callback(agent->context, &event);
}

/* The UDP socket sofia listens on for `family`: the process's datagram socket bound to the
 * port of the agent's URL (nua does not hand out its transports; TCP and TLS share the port,
 * media sockets do not). -1 when there is none. */
static int sip_udp_socket(csip_agent *agent, int family) {
    int *cached = family == AF_INET6 ? &agent->udp_fd6 : &agent->udp_fd4;
    if (*cached != -2) return *cached;
    *cached = -1;
    url_t *url = url_make(agent->home, agent->url);
    int port = url && url->url_port ? atoi(url->url_port) : 0;
    if (port <= 0) return -1;
    long limit = sysconf(_SC_OPEN_MAX);
    if (limit <= 0 || limit > 65536) limit = 65536;
    for (int fd = 0; fd < limit; fd++) {
        int type = 0;
        socklen_t length = sizeof type;
        if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &length) != 0 || type != SOCK_DGRAM) continue;
        struct sockaddr_storage bound;
        socklen_t bound_length = sizeof bound;
        if (getsockname(fd, (struct sockaddr *)&bound, &bound_length) != 0 || bound.ss_family != family) continue;
        int bound_port = family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&bound)->sin6_port)
                                            : ntohs(((struct sockaddr_in *)&bound)->sin_port);
        if (bound_port == port) {
            *cached = fd;
            break;
        }
    }
    return *cached;
}

/* An empty keep-alive (RFC 5626's double CRLF, which SIP parsers skip) from the SIP socket to
 * a peer's flow: this side's NAT then lets what the peer sends from there in. */
static void send_flow_keepalive(csip_agent *agent, struct call_entry const *entry) {
    if (!entry->flow_length) return;
    int fd = sip_udp_socket(agent, entry->flow.ss_family);
    if (fd < 0) return;
    static char const crlf[] = "\r\n\r\n";
    (void)sendto(fd, crlf, sizeof crlf - 1, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr const *)&entry->flow, entry->flow_length);
}

static void flow_tick(struct csip_agent *agent, su_timer_t *timer, su_timer_arg_t *argument) {
    (void)timer;
    (void)argument;
    for (size_t i = 0; i < agent->call_count; i++) send_flow_keepalive(agent, &agent->calls[i]);
}

/* A peer whose INVITE came through a proxy that does not Record-Route sends its ACK, BYE and
 * re-INVITEs straight to this side's Contact. Behind a NAT that lets in only what answers what
 * went out (most do), they would be dropped: a 200 never acknowledged, the call failing after
 * seconds. So this side sends to the peer's address at once, and again every keep-alive
 * interval while the call lasts (a NAT forgets an idle UDP flow within minutes). */
static void open_flow(csip_agent *agent, long call, char const *host, char const *port) {
    struct call_entry *entry = call_entry(agent, call);
    if (!entry || !host || !port) return;
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_DGRAM, .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV };
    struct addrinfo *found = NULL;
    if (getaddrinfo(host, port, &hints, &found) != 0 || !found) return;
    if (found->ai_addrlen <= sizeof entry->flow) {
        memcpy(&entry->flow, found->ai_addr, found->ai_addrlen);
        entry->flow_length = found->ai_addrlen;
    }
    freeaddrinfo(found);
    send_flow_keepalive(agent, entry);
    if (!agent->flow_timer) {
        pthread_mutex_lock(&agent->lock);
        su_duration_t interval = agent->keepalive_ms > 0 ? agent->keepalive_ms : 25000;
        pthread_mutex_unlock(&agent->lock);
        agent->flow_timer = su_timer_create(su_root_task(agent->root), interval);
        if (agent->flow_timer) su_timer_set_interval(agent->flow_timer, flow_tick, NULL, interval);
    }
}

/* Symmetric signaling for a caller behind a NAT: with no Record-Route, requests in its dialog
 * (BYE, re-INVITE, UPDATE) would go to its Contact, a private address nothing outside its NAT
 * reaches. They go instead to the address its requests come from, the Request-URI staying the
 * Contact. Straight from the caller, that is where its INVITE came from (the top Via's received
 * and rport, RFC 3581). Through a proxy that stays out of the dialog, the caller's requests will
 * come straight from its own flow, which its first proxy saw: the caller's Via (the last) with
 * the received and rport that proxy added; without them, the Contact is taken as it is. */
static void route_to_source(csip_agent *agent, long call, nua_handle_t *nh, sip_t const *sip) {
    if (!sip || !sip->sip_via || sip->sip_record_route || !sip->sip_contact) return;
    sip_via_t const *via = sip->sip_via;
    int proxied = via->v_next != NULL;
    while (via->v_next) via = via->v_next;
    if (proxied && !(via->v_received && *via->v_received) && !(via->v_rport && *via->v_rport)) return;
    char const *host = via->v_received && *via->v_received ? via->v_received : via->v_host;
    char const *port = via->v_rport && *via->v_rport ? via->v_rport : via->v_port ? via->v_port : "5060";
    if (!host) return;
    if (via->v_protocol && strcasestr(via->v_protocol, "TLS")) return;  /* TLS names its peer: left to the Contact */
    char const *transport = via->v_protocol && strcasestr(via->v_protocol, "TCP") ? "tcp" : "udp";
    if (proxied && strcmp(transport, "udp") == 0) open_flow(agent, call, host, port);
    url_t const *contact = sip->sip_contact->m_url;
    char const *contact_port = contact->url_port ? contact->url_port : "5060";
    if (contact->url_host && strcasecmp(contact->url_host, host) == 0 && strcmp(contact_port, port) == 0) return;
    char proxy[300];
    snprintf(proxy, sizeof proxy, strchr(host, ':') ? "sip:[%s]:%s;transport=%s" : "sip:%s:%s;transport=%s", host, port, transport);
    nua_set_hparams(nh, NUTAG_PROXY(proxy), TAG_END());
}

/* A BYE this side did not ask for (and no BYE from the peer): the stack ended the session —
 * the session timer ran out, or the peer refused or never answered a refresh. Told once. */
static void stack_ended(csip_agent *agent, long call) {
    struct call_entry *entry = call_entry(agent, call);
    if (!entry || entry->bye_sent) return;
    entry->bye_sent = 1;
    csip_event event = { .kind = CSIP_EVENT_SESSION_EXPIRED, .status = 408,
                         .phrase = "the peer stopped refreshing the SIP session (its session timer ran out, or a refresh failed)",
                         .call = call };
    agent->callback(agent->context, &event);
}

static void on_event(nua_event_t event, int status, char const *phrase, nua_t *nua, csip_agent *agent,
                     nua_handle_t *nh, void *hmagic, sip_t const *sip, tagi_t tags[]) {
    (void)nua;
    long call = (long)(intptr_t)hmagic;
    switch (event) {
    case nua_i_invite:
        if (!call && sip && sip->sip_replaces) {
            /* An attended transfer's INVITE (RFC 3891): it replaces a call here, or gets 481. */
            nua_handle_t *replaced = nua_handle_by_replaces(nua, sip->sip_replaces);
            long replaced_id = replaced ? (long)(intptr_t)nua_handle_magic(replaced) : 0;
            if (replaced) nua_handle_unref(replaced);
            if (replaced_id <= 0 || !call_entry(agent, replaced_id)) {
                nua_respond(nh, 481, "Call/Transaction Does Not Exist (the Replaces names no call here)", NUTAG_WITH_THIS(nua), TAG_END());
                nua_handle_destroy(nh);
                break;
            }
            call = new_id(agent);
            nua_handle_bind(nh, (void *)(intptr_t)call);
            add_call(agent, call, nh);
            route_to_source(agent, call, nh, sip);
            csip_event replacing = { .kind = CSIP_EVENT_INVITE, .status = status, .phrase = phrase, .call = call, .replaces = replaced_id };
            report_with(agent->callback, agent->context, &replacing, sip);
            break;
        }
        if (!call) {
            call = new_id(agent);
            nua_handle_bind(nh, (void *)(intptr_t)call);
            add_call(agent, call, nh);
            struct call_entry *entry = call_entry(agent, call);
            if (entry && sip && sip->sip_via && sip->sip_via->v_protocol && strcasestr(sip->sip_via->v_protocol, "TLS"))
                entry->tls = 1;
            route_to_source(agent, call, nh, sip);
        }
        emit(agent, CSIP_EVENT_INVITE, status, phrase, call, sip);
        break;
    case nua_r_invite: {
        /* A proxy's challenge is answered once with the registration's credentials. */
        struct call_entry *entry = call_entry(agent, call);
        if ((status == 401 || status == 407) && entry && entry->auth_tries < 1 && answer_challenge(agent, nh, sip)) {
            entry->auth_tries++;
            break;
        }
        /* Placed through the registrar, which stays out of the dialog: the callee's requests
         * come straight from where its Contact says. */
        if (status >= 200 && status < 300 && entry && agent->registration && sip && !sip->sip_record_route && sip->sip_contact) {
            url_t const *contact = sip->sip_contact->m_url;
            char transport[16] = "";
            if (!contact->url_params || url_param(contact->url_params, "transport", transport, sizeof transport) == 0)
                snprintf(transport, sizeof transport, "udp");
            if (strcasecmp(transport, "udp") == 0) open_flow(agent, call, contact->url_host, contact->url_port ? contact->url_port : "5060");
        }
        emit(agent, CSIP_EVENT_RESPONSE, status, phrase, call, sip);
        break;
    }
    case nua_r_register:
    case nua_r_unregister:
        if (call != REGISTRATION_ID || nh != agent->registration) break;  /* a replaced registration's */
        if (status < 200) break;
        /* Twice at most between successes: a fresh nonce after a registrar restart is answered,
         * a password the registrar keeps refusing is not retried for ever. */
        if ((status == 401 || status == 407) && agent->reg_auth_tries < 2 && answer_challenge(agent, nh, sip)) {
            agent->reg_auth_tries++;
            break;
        }
        agent->reg_auth_tries = 0;
        registration_result(agent, status, phrase, sip, event == nua_r_unregister);
        break;
    case nua_i_cancel:
        emit(agent, CSIP_EVENT_CANCEL, status, phrase, call, sip);
        break;
    case nua_i_bye: {
        struct call_entry *entry = call_entry(agent, call);
        if (entry) entry->bye_sent = 1;
        emit(agent, CSIP_EVENT_BYE, status, phrase, call, sip);
        break;
    }
    case nua_r_bye:
        stack_ended(agent, call);
        emit(agent, CSIP_EVENT_BYE_RESPONSE, status, phrase, call, sip);
        break;
    case nua_r_options:
        if (call > 0 && status >= 200) {
            csip_event reply = { .kind = CSIP_EVENT_OPTIONS_RESPONSE, .status = status, .phrase = phrase, .call = call,
                                 .local = sip == NULL || (sip->sip_flags & NTA_INTERNAL_MSG) != 0 };
            agent->callback(agent->context, &reply);
        }
        break;
    case nua_i_update: {
        /* Answered by the node (the offer's answer), one at a time: a second one while the
         * first waits gets 500 with Retry-After (RFC 3311 §5.2). */
        struct call_entry *entry = call_entry(agent, call);
        if (!entry) {
            nua_respond(nh, 481, "Call Does Not Exist", NUTAG_WITH_THIS(nua), TAG_END());
            break;
        }
        if (entry->update_saved) {
            nua_respond(nh, 500, "Server Internal Error", NUTAG_WITH_THIS(nua), SIPTAG_RETRY_AFTER_STR("1"), TAG_END());
            break;
        }
        nua_save_event(nua, entry->update);
        entry->update_saved = 1;
        emit(agent, CSIP_EVENT_UPDATE, status, phrase, call, sip);
        break;
    }
    case nua_i_refer: {
        /* A transfer (RFC 3515): the node decides (csip_respond_refer), one at a time. A REFER
         * outside a call is refused: the node follows transfers of its own calls only. */
        struct call_entry *entry = call ? call_entry(agent, call) : NULL;
        if (!entry) {
            nua_respond(nh, 403, "Forbidden (transfers are followed only within a call)", NUTAG_WITH_THIS(nua), TAG_END());
            if (!call) nua_handle_destroy(nh);
            break;
        }
        if (entry->refer_saved) {
            nua_respond(nh, 491, "Request Pending", NUTAG_WITH_THIS(nua), TAG_END());
            break;
        }
        sip_event_t const *refer_event = NULL;
        tl_gets(tags, NUTAG_REFER_EVENT_REF(refer_event), TAG_END());
        if (entry->refer_event) su_free(nua_handle_home(nh), entry->refer_event);
        entry->refer_event = refer_event ? sip_event_dup(nua_handle_home(nh), refer_event) : NULL;
        nua_save_event(nua, entry->refer);
        entry->refer_saved = 1;
        report_refer(agent->callback, agent->context, status, phrase, call, sip);
        break;
    }
    case nua_r_refer:
        if (call > 0 && status >= 200) emit(agent, CSIP_EVENT_REFER_RESPONSE, status, phrase, call, sip);
        break;
    case nua_i_notify:
        /* The progress of a transfer this side asked for (the stack answers the NOTIFY). */
        if (call > 0) emit(agent, CSIP_EVENT_NOTIFY, status, phrase, call, sip);
        break;
    case nua_i_ack:
        emit(agent, CSIP_EVENT_ACK, status, phrase, call, sip);
        break;
    case nua_i_info:
        emit(agent, CSIP_EVENT_INFO, status, phrase, call, sip);
        break;
    case nua_i_options: {
        /* A proxy's probe (a dispatcher's keep-alive) or a peer asking what this node takes:
         * answered with the node's availability, 503 with Retry-After while it takes no calls. */
        pthread_mutex_lock(&agent->lock);
        int answer = call ? 200 : agent->options_status, retry = agent->options_retry_after;
        pthread_mutex_unlock(&agent->lock);
        char retry_after[16];
        snprintf(retry_after, sizeof retry_after, "%d", retry > 0 ? retry : 0);
        nua_respond(nh, answer, sip_status_phrase(answer), NUTAG_WITH_THIS(nua),
                    TAG_IF(answer >= 300 && retry > 0, SIPTAG_RETRY_AFTER_STR(retry_after)),
                    SIPTAG_ACCEPT_STR("application/sdp"), TAG_END());
        if (!call) nua_handle_destroy(nh);
        break;
    }
    case nua_i_state: {
        int state = nua_callstate_init;
        tl_gets(tags, NUTAG_CALLSTATE_REF(state), TAG_END());
        /* The stack ending a confirmed session on its own goes through `terminating`. */
        if (state == nua_callstate_terminating && call) stack_ended(agent, call);
        if (state == nua_callstate_terminated && call) {
            emit(agent, CSIP_EVENT_TERMINATED, status, phrase, call, NULL);
            remove_call(agent, call);
            nua_handle_destroy(nh);
        }
        break;
    }
    case nua_i_error:
        emit(agent, CSIP_EVENT_ERROR, status, phrase, call, NULL);
        break;
    case nua_r_shutdown:
        if (status >= 200) {
            nua_destroy(agent->nua);
            agent->nua = NULL;
            su_root_break(agent->root);
        }
        break;
    default:
        /* CANCEL and BYE are answered by the stack itself; other requests, and
         * handles nobody wanted (an incoming SUBSCRIBE, a MESSAGE) are let go. */
        if (nh && !call && event != nua_r_set_params && event != nua_r_get_params) nua_handle_destroy(nh);
        break;
    }
}

/* MARK: commands (the agent's thread) */

static void perform(csip_agent *agent, struct command *command) {
    nua_handle_t *handle = call_handle(agent, command->call);
    switch (command->op) {
    case OP_INVITE:
        if (!handle) {
            if (!command->a || agent->stopping) break;
            /* A bare URI in angle brackets, so that its parameters (;transport=tls) stay the URI's
             * and not the To header's. */
            char *to = command->a;
            char *bracketed = NULL;
            if (!strchr(to, '<')) {
                size_t size = strlen(to) + 3;
                bracketed = malloc(size);
                if (bracketed) {
                    snprintf(bracketed, size, "<%s>", to);
                    to = bracketed;
                }
            }
            handle = nua_handle(agent->nua, (void *)(intptr_t)command->call, SIPTAG_TO_STR(to), TAG_END());
            free(bracketed);
            if (!handle) {
                csip_event event = { .kind = CSIP_EVENT_RESPONSE, .status = 400, .phrase = "the address is not a SIP URI", .call = command->call };
                agent->callback(agent->context, &event);
                break;
            }
            add_call(agent, command->call, handle);
            struct call_entry *entry = call_entry(agent, command->call);
            if (entry && (strncasecmp(command->a, "sips:", 5) == 0 || strcasestr(command->a, "transport=tls")))
                entry->tls = 1;
            if (command->b) {
                char from[640];
                snprintf(from, sizeof from, "\"%s\" %s", command->b, agent->from);
                int tls = entry && entry->tls && agent->tls_contact;
                /* A call placed for a transfer: the stack reports its progress to the referrer
                 * by NOTIFY in the referring call (RFC 3515), and it replaces a dialog there
                 * when the transfer named one (RFC 3891). */
                struct call_entry *referring = command->status > 0 ? call_entry(agent, command->status) : NULL;
                int notify = referring && referring->refer_event;
                nua_invite(handle, SIPTAG_FROM_STR(from), TAG_IF(tls, SIPTAG_CONTACT_STR(agent->tls_contact)),
                           TAG_IF(notify, NUTAG_NOTIFY_REFER(notify ? referring->handle : NULL)),
                           TAG_IF(notify, NUTAG_REFER_EVENT(notify ? referring->refer_event : NULL)),
                           TAG_IF(command->d != NULL, SIPTAG_REPLACES_STR(command->d)),
                           TAG_IF(command->c != NULL, SIPTAG_CONTENT_TYPE_STR("application/sdp")),
                           TAG_IF(command->c != NULL, SIPTAG_PAYLOAD_STR(command->c)), TAG_END());
                break;
            }
        }
        {
            struct call_entry *entry = call_entry(agent, command->call);
            int tls = entry && entry->tls && agent->tls_contact;
            nua_invite(handle, TAG_IF(tls, SIPTAG_CONTACT_STR(agent->tls_contact)),
                       TAG_IF(command->c != NULL, SIPTAG_CONTENT_TYPE_STR("application/sdp")),
                       TAG_IF(command->c != NULL, SIPTAG_PAYLOAD_STR(command->c)), TAG_END());
        }
        break;
    case OP_RESPOND: {
        if (!handle) break;
        struct call_entry *entry = call_entry(agent, command->call);
        int tls = entry && entry->tls && agent->tls_contact;
        /* nua keeps the phrase's pointer until its stack thread sends the response: it lives
         * in the agent's home (a few bytes per response, freed when the agent stops). */
        nua_respond(handle, command->status, command->a ? su_strdup(agent->home, command->a) : sip_status_phrase(command->status),
                    TAG_IF(tls, SIPTAG_CONTACT_STR(agent->tls_contact)),
                    TAG_IF(command->b != NULL, SIPTAG_CONTENT_TYPE_STR("application/sdp")),
                    TAG_IF(command->b != NULL, SIPTAG_PAYLOAD_STR(command->b)),
                    TAG_IF(command->c != NULL, SIPTAG_HEADER_STR(command->c ? su_strdup(agent->home, command->c) : NULL)), TAG_END());
        break;
    }
    case OP_RESPOND_UPDATE: {
        struct call_entry *entry = call_entry(agent, command->call);
        if (!entry || !entry->update_saved) break;
        nua_respond(entry->handle, command->status, command->a ? su_strdup(agent->home, command->a) : sip_status_phrase(command->status),
                    NUTAG_WITH_SAVED(entry->update),
                    TAG_IF(command->b != NULL, SIPTAG_CONTENT_TYPE_STR("application/sdp")),
                    TAG_IF(command->b != NULL, SIPTAG_PAYLOAD_STR(command->b)), TAG_END());
        nua_destroy_event(entry->update);
        entry->update_saved = 0;
        break;
    }
    case OP_RESPOND_REFER: {
        struct call_entry *entry = call_entry(agent, command->call);
        if (!entry || !entry->refer_saved) break;
        nua_respond(entry->handle, command->status, command->a ? su_strdup(agent->home, command->a) : sip_status_phrase(command->status),
                    NUTAG_WITH_SAVED(entry->refer), TAG_END());
        nua_destroy_event(entry->refer);
        entry->refer_saved = 0;
        break;
    }
    case OP_REFER: {
        if (!handle || !command->a) break;
        struct call_entry *other = command->status > 0 ? call_entry(agent, command->status) : NULL;
        if (!other) {
            nua_refer(handle, SIPTAG_REFER_TO_STR(command->a), TAG_END());
            break;
        }
        /* An attended transfer: the target is asked to let the new call replace its dialog
         * with this side (RFC 3891), named by a Replaces in the Refer-To's headers. */
        su_home_t home[1] = { SU_HOME_INIT(home) };
        sip_replaces_t *replaces = nua_handle_make_replaces(other->handle, home, 0);
        char *query = replaces ? sip_headers_as_url_query(home, SIPTAG_REPLACES(replaces), TAG_END()) : NULL;
        if (query) {
            char *refer_to = su_sprintf(home, "<%s?%s>", command->a, query);
            nua_refer(handle, SIPTAG_REFER_TO_STR(refer_to), TAG_END());
        } else {
            csip_event failed = { .kind = CSIP_EVENT_REFER_RESPONSE, .status = 500,
                                  .phrase = "the consulted call has no dialog to replace", .call = command->call };
            agent->callback(agent->context, &failed);
        }
        su_home_deinit(home);
        break;
    }
    case OP_OPTIONS:
        if (handle) nua_options(handle, TAG_END());
        break;
    case OP_BYE:
        if (handle) {
            struct call_entry *entry = call_entry(agent, command->call);
            if (entry) entry->bye_sent = 1;
            nua_bye(handle, TAG_END());
        }
        break;
    case OP_CANCEL:
        if (handle) {
            struct call_entry *entry = call_entry(agent, command->call);
            if (entry) entry->bye_sent = 1;
            nua_cancel(handle, TAG_END());
        }
        break;
    case OP_INFO:
        if (handle) nua_info(handle, SIPTAG_CONTENT_TYPE_STR(command->a), SIPTAG_PAYLOAD_STR(command->b), TAG_END());
        break;
    case OP_REGISTER: {
        if (agent->stopping) break;
        if (agent->registration) nua_handle_destroy(agent->registration);
        free(agent->reg_user);
        free(agent->reg_password);
        agent->reg_user = copy(command->c);
        agent->reg_password = copy(command->d);
        agent->reg_auth_tries = 0;
        char from[640], expires[16];
        snprintf(from, sizeof from, "<%s>", command->a);
        snprintf(expires, sizeof expires, "%d", command->status > 0 ? command->status : 3600);
        /* Calls go out through the registrar (its loose route on each request that starts a
         * dialog, RFC 3261 §8.1.2), from the address of record. Requests in a dialog follow
         * its route set: through the registrar where it Record-Routes, else straight to the
         * peer (a registrar that stays out of dialogs refuses them: "404 Not here"). */
        free(agent->from);
        agent->from = copy(from);
        char route[700];
        snprintf(route, sizeof route, "<%s;lr>", command->b);
        nua_set_params(agent->nua, NUTAG_INITIAL_ROUTE_STR(route), SIPTAG_FROM_STR(from), TAG_END());
        agent->registration = nua_handle(agent->nua, (void *)(intptr_t)REGISTRATION_ID, SIPTAG_TO_STR(from), SIPTAG_FROM_STR(from), TAG_END());
        if (!agent->registration) {
            registration_result(agent, 400, "the address of record is not a SIP URI", NULL, 0);
            break;
        }
        /* Behind a NAT (RFC 5626 §4.4, as sofia's outbound does it): an OPTIONS to the
         * registrar every keep-alive interval holds the binding open, and a Contact the
         * registrar saw from elsewhere (received, rport) is registered again as that
         * ("natify"). No self-check through the registrar ("validate"): registrars answer it
         * as they please. */
        pthread_mutex_lock(&agent->lock);
        unsigned keepalive = (unsigned)agent->keepalive_ms;
        pthread_mutex_unlock(&agent->lock);
        nua_register(agent->registration, NUTAG_REGISTRAR(command->b), SIPTAG_EXPIRES_STR(expires),
                     NUTAG_OUTBOUND(keepalive ? "natify, options-keepalive, no-validate" : "natify, no-options-keepalive, no-validate"),
                     NUTAG_KEEPALIVE(keepalive), TAG_END());
        break;
    }
    case OP_UNREGISTER:
        if (agent->registration && !agent->stopping) nua_unregister(agent->registration, TAG_END());
        break;
    case OP_SHUTDOWN:
        if (!agent->stopping && agent->nua) {
            agent->stopping = 1;
            nua_shutdown(agent->nua);
        }
        break;
    }
}

static int on_wake(csip_agent *agent, su_wait_t *wait, csip_agent *arg) {
    (void)wait; (void)arg;
    char drain[64];
    while (read(agent->wake[0], drain, sizeof drain) > 0) {}
    for (;;) {
        pthread_mutex_lock(&agent->lock);
        struct command *command = agent->head;
        if (command) {
            agent->head = command->next;
            if (!agent->head) agent->tail = NULL;
        }
        pthread_mutex_unlock(&agent->lock);
        if (!command) break;
        perform(agent, command);
        free(command->a);
        free(command->b);
        free(command->c);
        free(command->d);
        free(command);
    }
    return 0;
}

static void enqueue4(csip_agent *agent, enum command_op op, long call, int status, const char *a, const char *b, const char *c,
                     const char *d) {
    struct command *command = calloc(1, sizeof *command);
    if (!command) return;
    *command = (struct command){ .op = op, .call = call, .status = status, .a = copy(a), .b = copy(b), .c = copy(c), .d = copy(d) };
    pthread_mutex_lock(&agent->lock);
    if (agent->tail) agent->tail->next = command; else agent->head = command;
    agent->tail = command;
    pthread_mutex_unlock(&agent->lock);
    char byte = 1;
    ssize_t written = write(agent->wake[1], &byte, 1);
    (void)written;  /* a full pipe has a wake-up pending already */
}

static void enqueue(csip_agent *agent, enum command_op op, long call, int status, const char *a, const char *b, const char *c) {
    enqueue4(agent, op, call, status, a, b, c, NULL);
}

/* MARK: the thread */

static pthread_once_t su_once = PTHREAD_ONCE_INIT;

/* sofia-sip's own log lines (transport errors, transaction traces) go to standard error by
 * default: the node reports what matters through its events. CALLNODE_SIP_LOG=1 keeps them. */
static void discard_log(void *stream, char const *format, va_list arguments) {
    (void)stream; (void)format; (void)arguments;
}

static void su_start(void) {
    su_init();
    const char *keep = getenv("CALLNODE_SIP_LOG");
    if (!keep || !*keep || strcmp(keep, "0") == 0) {
        su_log_redirect(NULL, discard_log, NULL);
        su_log_redirect(su_log_global, discard_log, NULL);
    }
}

static void started(csip_agent *agent, int ready) {
    pthread_mutex_lock(&agent->lock);
    agent->ready = ready;
    pthread_cond_signal(&agent->ready_cond);
    pthread_mutex_unlock(&agent->lock);
}

static void *run(void *argument) {
    csip_agent *agent = argument;
    su_home_init(agent->home);
    agent->root = su_root_create(agent);
    if (!agent->root) {
        snprintf(agent->error, sizeof agent->error, "sofia-sip could not make its event loop");
        su_home_deinit(agent->home);
        started(agent, -1);
        return NULL;
    }
    su_wait_create(agent->wait, agent->wake[0], SU_WAIT_IN);
    su_root_register(agent->root, agent->wait, on_wake, agent, 0);
    agent->nua = nua_create(agent->root, on_event, agent,
                            NUTAG_URL(agent->url),
                            TAG_IF(agent->sips_url != NULL, NUTAG_SIPS_URL(agent->sips_url)),
                            TAG_IF(agent->certificate_dir != NULL, NUTAG_CERTIFICATE_DIR(agent->certificate_dir)),
                            TAG_END());
    if (!agent->nua) {
        /* errno says nothing reliable by now ("Success"): name the likely causes instead. */
        snprintf(agent->error, sizeof agent->error,
                 "cannot listen for SIP at %s%s%s (a port in use for UDP or TCP, an address not this host's, or an unusable TLS certificate)",
                 agent->url, agent->sips_url ? " and " : "", agent->sips_url ? agent->sips_url : "");
        su_root_destroy(agent->root);
        su_home_deinit(agent->home);
        started(agent, -1);
        return NULL;
    }
    /* SDP passes through untouched (the node negotiates); no automatic answers or alerts. */
    nua_set_params(agent->nua,
                   NUTAG_MEDIA_ENABLE(0),
                   NUTAG_AUTOALERT(0),
                   NUTAG_AUTOANSWER(0),
                   NUTAG_AUTOACK(1),
                   NUTAG_ENABLEINVITE(1),
                   /* The methods the node takes, and no others: sofia's default list (which
                    * NUTAG_ALLOW only adds to) has REFER, MESSAGE, SUBSCRIBE and NOTIFY, which
                    * it would accept (202, 200) for a node that does nothing with them. */
                   SIPTAG_ALLOW_STR("INVITE, ACK, BYE, CANCEL, OPTIONS, INFO, PRACK, UPDATE, REFER, NOTIFY"),
                   /* UPDATE's offer is answered by the node, not by the stack (which would send
                    * a 200 without an answer: media is the node's); so is a REFER (the node
                    * decides whether it follows a transfer: 202, or 400 and 403). */
                   NUTAG_APPL_METHOD("OPTIONS, UPDATE, REFER"),
                   /* Session timers (RFC 4028): sofia refreshes and ends expired sessions. 90 s
                    * is the RFC's floor (sofia's default 120 refused peers asking for 90 with
                    * 422). A refresh goes as an UPDATE without a body: a re-INVITE without
                    * SDP from the callee would make the caller offer in its 200, which the
                    * stack's automatic ACK cannot answer. */
                   NUTAG_MIN_SE(90),
                   NUTAG_UPDATE_REFRESH(1),
                   /* Attended transfers (RFC 3891): an INVITE with Replaces is taken. */
                   NUTAG_SUPPORTED("replaces"),
                   SIPTAG_FROM_STR(agent->from),
                   TAG_IF(agent->user_agent != NULL, SIPTAG_USER_AGENT_STR(agent->user_agent)),
                   TAG_END());
    started(agent, 1);
    su_root_run(agent->root);
    /* Stopped: every handle went with nua_destroy. */
    if (agent->flow_timer) su_timer_destroy(agent->flow_timer);
    agent->flow_timer = NULL;
    su_root_unregister(agent->root, agent->wait, on_wake, agent);
    su_root_destroy(agent->root);
    su_home_deinit(agent->home);
    csip_event event = { .kind = CSIP_EVENT_SHUTDOWN, .status = 200, .phrase = "stopped" };
    agent->callback(agent->context, &event);
    return NULL;
}

/* MARK: the API */

csip_agent *csip_start(const char *url, const char *sips_url, const char *certificate_dir, const char *from,
                       const char *user_agent, csip_event_f callback, void *context, char *error, size_t error_size) {
    pthread_once(&su_once, su_start);
    csip_agent *agent = calloc(1, sizeof *agent);
    if (!agent) {
        snprintf(error, error_size, "out of memory");
        return NULL;
    }
    agent->options_status = 200;
    agent->udp_fd4 = agent->udp_fd6 = -2;
    agent->url = copy(url);
    agent->sips_url = copy(sips_url);
    agent->certificate_dir = copy(certificate_dir);
    agent->from = copy(from);
    agent->user_agent = copy(user_agent);
    if (sips_url && strncmp(sips_url, "sips:", 5) == 0) {
        size_t size = strlen(sips_url) + 32;
        agent->tls_contact = malloc(size);
        if (agent->tls_contact) snprintf(agent->tls_contact, size, "<sip:%s;transport=tls>", sips_url + 5);
    }
    agent->callback = callback;
    agent->context = context;
    pthread_mutex_init(&agent->lock, NULL);
    pthread_cond_init(&agent->ready_cond, NULL);
    if (pipe2(agent->wake, O_NONBLOCK | O_CLOEXEC) != 0) {
        snprintf(error, error_size, "cannot make a pipe: %s", strerror(errno));
        free(agent);
        return NULL;
    }
    if (pthread_create(&agent->thread, NULL, run, agent) != 0) {
        snprintf(error, error_size, "cannot start the SIP thread");
        close(agent->wake[0]);
        close(agent->wake[1]);
        free(agent);
        return NULL;
    }
    pthread_mutex_lock(&agent->lock);
    while (agent->ready == 0) pthread_cond_wait(&agent->ready_cond, &agent->lock);
    int ready = agent->ready;
    pthread_mutex_unlock(&agent->lock);
    if (ready < 0) {
        pthread_join(agent->thread, NULL);
        snprintf(error, error_size, "%s", agent->error);
        close(agent->wake[0]);
        close(agent->wake[1]);
        free(agent->url); free(agent->sips_url); free(agent->certificate_dir); free(agent->from); free(agent->user_agent);
        free(agent->tls_contact);
        free(agent);
        return NULL;
    }
    return agent;
}

long csip_new_call(csip_agent *agent) { return new_id(agent); }

void csip_invite(csip_agent *agent, long call, const char *to, const char *from_display, const char *sdp) {
    enqueue(agent, OP_INVITE, call, 0, to, from_display, sdp);
}

void csip_invite_referred(csip_agent *agent, long call, const char *to, const char *from_display, const char *sdp,
                          long referring, const char *replaces) {
    enqueue4(agent, OP_INVITE, call, (int)referring, to, from_display, sdp, replaces);
}

void csip_respond_refer(csip_agent *agent, long call, int status, const char *phrase) {
    enqueue(agent, OP_RESPOND_REFER, call, status, phrase, NULL, NULL);
}

void csip_refer(csip_agent *agent, long call, const char *refer_to) {
    enqueue(agent, OP_REFER, call, 0, refer_to, NULL, NULL);
}

void csip_refer_replacing(csip_agent *agent, long call, const char *refer_to, long replacing) {
    enqueue(agent, OP_REFER, call, (int)replacing, refer_to, NULL, NULL);
}

void csip_respond(csip_agent *agent, long call, int status, const char *phrase, const char *sdp) {
    enqueue(agent, OP_RESPOND, call, status, phrase, sdp, NULL);
}

void csip_respond_update(csip_agent *agent, long call, int status, const char *phrase, const char *sdp) {
    enqueue(agent, OP_RESPOND_UPDATE, call, status, phrase, sdp, NULL);
}

void csip_respond_with_headers(csip_agent *agent, long call, int status, const char *phrase, const char *sdp,
                               const char *headers) {
    enqueue(agent, OP_RESPOND, call, status, phrase, sdp, headers);
}

void csip_set_availability(csip_agent *agent, int status, int retry_after) {
    pthread_mutex_lock(&agent->lock);
    agent->options_status = status;
    agent->options_retry_after = retry_after;
    pthread_mutex_unlock(&agent->lock);
}

void csip_options(csip_agent *agent, long call) { enqueue(agent, OP_OPTIONS, call, 0, NULL, NULL, NULL); }

void csip_bye(csip_agent *agent, long call) { enqueue(agent, OP_BYE, call, 0, NULL, NULL, NULL); }

void csip_cancel(csip_agent *agent, long call) { enqueue(agent, OP_CANCEL, call, 0, NULL, NULL, NULL); }

void csip_info(csip_agent *agent, long call, const char *content_type, const char *body) {
    enqueue(agent, OP_INFO, call, 0, content_type, body, NULL);
}

void csip_register(csip_agent *agent, const char *aor, const char *registrar, const char *user, const char *password,
                   int expires, int keepalive_ms) {
    pthread_mutex_lock(&agent->lock);
    agent->keepalive_ms = keepalive_ms > 0 ? keepalive_ms : 0;
    pthread_mutex_unlock(&agent->lock);
    enqueue4(agent, OP_REGISTER, 0, expires, aor, registrar, user, password);
}

void csip_unregister(csip_agent *agent) { enqueue(agent, OP_UNREGISTER, 0, 0, NULL, NULL, NULL); }

int csip_parse(const char *data, size_t size, csip_event_f callback, void *context) {
    pthread_once(&su_once, su_start);
    if (size > (size_t)SSIZE_MAX) return -1;
    msg_t *msg = msg_make(sip_default_mclass(), 0, data, (ssize_t)size);
    if (!msg) return -1;
    sip_t const *sip = sip_object(msg);
    int result = -1;
    if (sip && sip->sip_request && sip->sip_request->rq_method_name) {
        if (sip->sip_request->rq_method == sip_method_refer)
            report_refer(callback, context, 0, sip->sip_request->rq_method_name, 0, sip);
        else
            report(callback, context, CSIP_EVENT_INVITE, 0, sip->sip_request->rq_method_name, 0, sip);
        result = 1;
    } else if (sip && sip->sip_status) {
        result = 0;
    }
    msg_destroy(msg);
    return result;
}

void csip_stop(csip_agent *agent) {
    enqueue(agent, OP_SHUTDOWN, 0, 0, NULL, NULL, NULL);
    pthread_join(agent->thread, NULL);
    struct command *command = agent->head;
    while (command) {
        struct command *next = command->next;
        free(command->a); free(command->b); free(command->c); free(command->d); free(command);
        command = next;
    }
    close(agent->wake[0]);
    close(agent->wake[1]);
    free(agent->calls);
    free(agent->reg_user);
    free(agent->reg_password);
    free(agent->tls_contact);
    free(agent->url); free(agent->sips_url); free(agent->certificate_dir); free(agent->from); free(agent->user_agent);
    pthread_mutex_destroy(&agent->lock);
    pthread_cond_destroy(&agent->ready_cond);
    free(agent);
}
