// pusher-scenario.mjs drives a Pusher Channels server (rally serve with a
// Pusher app) with the real clients and SDK: pusher-js 8, Laravel Echo over
// pusher-js, and the `pusher` server SDK. It prints one line per check
// passed and exits 0, or prints the failure and exits 1.
//
//   node pusher-scenario.mjs '{"hostA":"127.0.0.1:1234","hostB":"...","appId":"..","key":"..","secret":"..","webhookPort":0,"fullHost":""}'
//
// hostB is a second node sharing the cluster (the same as hostA on one node).
// fullHost, when given, is a server with room for one connection (pusher-js
// meets 4100 there).
import crypto from 'node:crypto';
import http from 'node:http';
import Pusher from 'pusher';
import PusherJS from 'pusher-js';
import EchoPkg from 'laravel-echo';
import WebSocket from 'ws';

const Echo = EchoPkg.default ?? EchoPkg;
const cfg = JSON.parse(process.argv[2]);
const timeout = (cfg.waitMs ?? 20000);

function ok(what) { console.log('ok ' + what); }
function fail(what) { console.log('FAIL ' + what); process.exit(1); }
function within(p, what) {
	let t;
	return Promise.race([p, new Promise((_, rej) => { t = setTimeout(() => rej(new Error('timed out: ' + what)), timeout); })])
		.finally(() => clearTimeout(t));
}
// sendOnce calls send and waits for p: a client that has
// subscription_succeeded gets what any node sends after, so one try is
// enough across nodes too.
async function sendOnce(p, send, what) {
	const w = within(p, what);
	await send();
	return await w;
}
function hostPort(h) { const [host, port] = h.split(':'); return { host, port: Number(port) }; }

// The master key of end-to-end encrypted channels: the SDK encrypts with it
// and hands pusher-js each channel's key; rally never sees it.
const masterKey = crypto.randomBytes(32).toString('base64');
function sdk(hostport, secret = cfg.secret) {
	const { host, port } = hostPort(hostport);
	return new Pusher({ appId: cfg.appId, key: cfg.key, secret, host, port: String(port), useTLS: false, encryptionMasterKeyBase64: masterKey });
}
const apiA = sdk(cfg.hostA);
const apiB = sdk(cfg.hostB);

// The app's own auth endpoint, signing with the server SDK.
let nextUser = 0;
const auth = http.createServer((req, res) => {
	let body = '';
	req.on('data', (d) => { body += d; });
	req.on('end', () => {
		const q = new URLSearchParams(body);
		const socketId = q.get('socket_id');
		let out;
		if (req.url.startsWith('/user-auth')) {
			out = apiA.authenticateUser(socketId, { id: 'user-' + socketId, name: 'signed in' });
		} else {
			const channel = q.get('channel_name');
			if (channel.startsWith('private-forbidden')) { res.writeHead(403); res.end('{}'); return; }
			const user = req.headers['x-user'] ?? ('u' + (++nextUser));
			out = channel.startsWith('presence-')
				? apiA.authorizeChannel(socketId, channel, { user_id: user, user_info: { name: user } })
				: apiA.authorizeChannel(socketId, channel);
		}
		res.writeHead(200, { 'content-type': 'application/json' });
		res.end(JSON.stringify(out));
	});
});
await new Promise((r) => auth.listen(0, '127.0.0.1', r));
const authBase = 'http://127.0.0.1:' + auth.address().port;

// Webhooks from rally, verified with the SDK.
const hooks = [];
const hookWaiters = [];
let hookServer;
if (cfg.webhookPort) {
	hookServer = http.createServer((req, res) => {
		let body = '';
		req.on('data', (d) => { body += d; });
		req.on('end', () => {
			const wh = apiA.webhook({ headers: req.headers, rawBody: body });
			if (!wh.isValid()) { console.log('FAIL webhook signature did not verify: ' + body); process.exit(1); }
			for (const e of wh.getEvents()) hooks.push(e);
			for (const w of hookWaiters.splice(0)) w();
			res.writeHead(200); res.end();
		});
	});
	await new Promise((r) => hookServer.listen(cfg.webhookPort, '127.0.0.1', r));
}
async function webhook(name, channel, pred = () => true) {
	for (;;) {
		const e = hooks.find((e) => e.name === name && e.channel === channel && pred(e));
		if (e) return e;
		await new Promise((r) => hookWaiters.push(r));
	}
}

function client(hostport, user, key = cfg.key) {
	const { host, port } = hostPort(hostport);
	return new PusherJS(key, {
		cluster: 'mt1', wsHost: host, wsPort: port, forceTLS: false, enabledTransports: ['ws'], disableStats: true,
		channelAuthorization: { endpoint: authBase + '/auth', transport: 'ajax', headers: user ? { 'x-user': user } : {} },
		userAuthentication: { endpoint: authBase + '/user-auth', transport: 'ajax' },
	});
}
function connected(p) {
	return within(new Promise((res) => {
		if (p.connection.state === 'connected') res();
		p.connection.bind('connected', res);
	}), 'connected');
}
function subscribed(ch) {
	return within(new Promise((res, rej) => {
		ch.bind('pusher:subscription_succeeded', res);
		ch.bind('pusher:subscription_error', (e) => rej(new Error('subscription_error ' + JSON.stringify(e))));
	}), 'subscribed ' + ch.name);
}
function next(ch, event) { return within(new Promise((res) => ch.bind(event, res)), event + ' on ' + ch.name); }
// nextError resolves with the code of p's next pusher:error (or close)
// whose code is not in skip.
function nextError(p, what, skip = []) {
	return within(new Promise((res) => {
		const f = (e) => {
			const code = e?.error?.data?.code ?? e?.data?.code ?? e?.error?.code;
			if (skip.includes(code)) return;
			p.connection.unbind('error', f);
			res(code);
		};
		p.connection.bind('error', f);
	}), what);
}
// occupied waits until api's node reports channel occupied: a node's
// subscription reaches NATS before the other nodes hear of it, so from then
// on what the other node publishes on the channel reaches it.
async function occupied(api, channel) {
	await within((async () => {
		for (;;) {
			if ((await (await api.get({ path: '/channels/' + channel })).json()).occupied) return;
			await new Promise((r) => setTimeout(r, 50));
		}
	})(), channel + ' occupied');
}
// states records p's connection states from now on.
function states(p) { const seen = []; p.connection.bind('state_change', (s) => seen.push(s.current)); return seen; }

try {
	const a = client(cfg.hostA, 'alice');
	const b = client(cfg.hostB, 'bob');
	await connected(a); await connected(b);
	ok('pusher-js connected to both nodes');

	// Public channel: events triggered with the SDK on the other node.
	const pubA = a.subscribe('news');
	await subscribed(pubA);
	if (cfg.webhookPort) { await within(webhook('channel_occupied', 'news'), 'channel_occupied webhook'); ok('webhook channel_occupied verified by the SDK'); }
	let got = next(pubA, 'headline');
	if ((await sendOnce(got, () => apiB.trigger('news', 'headline', { title: 'hello' }), 'headline')).title !== 'hello') fail('public event data');
	ok('public channel: trigger on node B reaches pusher-js on node A');

	got = next(pubA, 'multi');
	await apiA.trigger(['news', 'other'], 'multi', { n: 2 });
	if ((await got).n !== 2) fail('multi-channel trigger');
	got = next(pubA, 'batched');
	await apiA.triggerBatch([{ channel: 'news', name: 'batched', data: { n: 3 } }, { channel: 'other', name: 'batched', data: {} }]);
	if ((await got).n !== 3) fail('triggerBatch');
	ok('trigger to several channels and triggerBatch');

	// Private channel and client events: relayed, not echoed.
	const privA = a.subscribe('private-room');
	const privB = b.subscribe('private-room');
	await Promise.all([subscribed(privA), subscribed(privB)]); // either may answer first
	let echoed = false;
	privA.bind('client-typing', () => { echoed = true; });
	got = next(privB, 'client-typing');
	if ((await sendOnce(got, () => privA.trigger('client-typing', { who: 'alice' }), 'client-typing')).who !== 'alice') fail('client event data');
	got = next(privA, 'from-api');
	await apiA.trigger('private-room', 'from-api', { x: 1 });
	await got;
	if (echoed) fail('client event echoed to its sender');
	ok('private channel: authorizeChannel signature accepted, client event relayed and not echoed');

	const forbidden = a.subscribe('private-forbidden');
	await within(new Promise((res) => forbidden.bind('pusher:subscription_error', res)), 'refused auth');
	ok('private channel refused when the auth endpoint refuses');

	// Presence: members across nodes, member_added/removed, users API.
	const presA = a.subscribe('presence-lobby');
	await subscribed(presA);
	await occupied(apiB, 'presence-lobby');
	const added = next(presA, 'pusher:member_added');
	const presB = b.subscribe('presence-lobby');
	await subscribed(presB);
	const m = await added;
	if (m.id !== 'bob') fail('member_added id ' + m.id);
	if (presB.members.count !== 2 || !presB.members.get('alice')) fail('presence members seen by B: ' + presB.members.count);
	ok('presence: member list and member_added across nodes');
	const waveMeta = new Promise((res) => presB.bind('client-wave', (d, meta) => res(meta)));
	const wave = await sendOnce(waveMeta, () => presA.trigger('client-wave', { hi: 1 }), 'client-wave');
	if (wave?.user_id !== 'alice') fail('client event on presence carries user_id: ' + JSON.stringify(wave));
	ok('presence client event carries the sender user_id');

	const info = await (await apiA.get({ path: '/channels/presence-lobby', params: { info: 'user_count,subscription_count' } })).json();
	if (!info.occupied || info.user_count !== 2) fail('channel info ' + JSON.stringify(info));
	const users = await (await apiB.get({ path: '/channels/presence-lobby/users' })).json();
	if (users.users.map((u) => u.id).sort().join() !== 'alice,bob') fail('users ' + JSON.stringify(users));
	const list = await (await apiA.get({ path: '/channels', params: { filter_by_prefix: 'presence-', info: 'user_count' } })).json();
	if (list.channels['presence-lobby']?.user_count !== 2) fail('channels ' + JSON.stringify(list));
	ok('HTTP API: channel info, users and channel list answer for the cluster');

	const removed = next(presA, 'pusher:member_removed');
	b.unsubscribe('presence-lobby');
	if ((await removed).id !== 'bob') fail('member_removed');
	ok('presence member_removed');

	// Encrypted channels are relayed as they are; cache channels replay.
	await apiA.trigger('cache-price', 'tick', { p: 42 });
	const cache = a.subscribe('cache-price');
	const cached = next(cache, 'tick');
	await subscribed(cache);
	if ((await cached).p !== 42) fail('cache replay');
	const miss = b.subscribe('cache-empty');
	await within(new Promise((res) => miss.bind('pusher:cache_miss', res)), 'cache_miss');
	ok('cache channel: last event replayed, cache_miss when empty');

	// User authentication.
	a.signin();
	await within(new Promise((res) => { const t = setInterval(() => { if (a.user.signinDonePromise) { clearInterval(t); res(a.user.signinDonePromise); } }, 20); }), 'signin');
	if (!a.user.user_data || !String(a.user.user_data.id ?? '').startsWith('user-')) fail('signin user_data ' + JSON.stringify(a.user.user_data));
	ok('pusher:signin with the SDK authenticateUser');

	// Laravel Echo over pusher-js.
	const echo = new Echo({ broadcaster: 'pusher', client: client(cfg.hostA, 'carol') });
	await connected(echo.connector.pusher);
	const shipped = new Promise((res) => echo.channel('orders').listen('.OrderShipped', res));
	const privEcho = new Promise((res) => echo.private('orders.1').listen('.Updated', res));
	const joined = within(new Promise((res) => echo.join('chat').here(res)), 'Echo join');
	const here = await joined;
	if (!here.some((u) => u.name === 'carol')) fail('Echo here ' + JSON.stringify(here));
	await within(new Promise((res) => {
		const t = setInterval(() => {
			const p = echo.connector.pusher;
			if (p.channel('private-orders.1')?.subscribed && p.channel('orders')?.subscribed) { clearInterval(t); res(); }
		}, 20);
	}), 'Echo subscriptions');
	if ((await sendOnce(shipped, () => apiB.trigger('orders', 'OrderShipped', { id: 7 }), 'Echo public')).id !== 7) fail('Echo public event');
	if ((await sendOnce(privEcho, () => apiB.trigger('private-orders.1', 'Updated', { id: 8 }), 'Echo private')).id !== 8) fail('Echo private event');
	ok('Laravel Echo: channel, private and join (here) over pusher-js');
	echo.disconnect();

	// Errors: a bad signature is refused, an unknown key gets 4001.
	let refused = false;
	try { await sdk(cfg.hostA, 'wrong-secret').trigger('news', 'x', {}); } catch (e) { refused = e.status === 401; }
	if (!refused) fail('bad signature accepted');
	ok('HTTP API refuses a bad signature (401)');
	const stranger = client(cfg.hostA, '', 'no-such-key');
	const code = await within(new Promise((res) => stranger.connection.bind('error', (e) => res(e?.error?.data?.code ?? e?.data?.code ?? e?.error?.code))), 'unknown app error');
	if (code !== 4001) fail('unknown app code ' + code);
	stranger.disconnect();
	ok('unknown app key: pusher:error 4001');

	// End-to-end encrypted channel: the SDK encrypts, pusher-js decrypts
	// with the key the auth endpoint gave it, and rally relays ciphertext.
	const vault = a.subscribe('private-encrypted-vault');
	await subscribed(vault);
	const { host: rawHost, port: rawPort } = hostPort(cfg.hostA);
	const raw = new WebSocket(`ws://${rawHost}:${rawPort}/app/${cfg.key}?protocol=7&client=raw&version=1`);
	const rawFrames = [];
	const rawEvent = within(new Promise((res) => raw.on('message', (m) => {
		const msg = JSON.parse(m);
		rawFrames.push(msg);
		if (msg.event === 'pusher:connection_established') {
			const channel = 'private-encrypted-vault';
			const { auth } = apiA.authorizeChannel(JSON.parse(msg.data).socket_id, channel);
			raw.send(JSON.stringify({ event: 'pusher:subscribe', data: { channel, auth } }));
		}
		if (msg.event === 'secret') res(msg);
	})), 'encrypted event on a raw socket');
	await within(new Promise((res) => { const t = setInterval(() => { if (rawFrames.some((f) => f.event === 'pusher_internal:subscription_succeeded')) { clearInterval(t); res(); } }, 20); }), 'raw subscription');
	got = next(vault, 'secret');
	if ((await sendOnce(got, () => apiB.trigger('private-encrypted-vault', 'secret', { word: 'swordfish' }), 'encrypted event')).word !== 'swordfish') fail('decrypted data');
	const wire = JSON.parse((await rawEvent).data);
	if (!wire.ciphertext || !wire.nonce || JSON.stringify(wire).includes('swordfish')) fail('encrypted channel carried ' + JSON.stringify(wire));
	raw.close();
	ok('private-encrypted channel: SDK encryptionMasterKeyBase64 to pusher-js, ciphertext on the wire');

	// Errors that keep the connection: a client event past the app's rate
	// (4301) and one on a public channel (4302); pusher-js reports them and
	// stays connected.
	const rateB = b.subscribe('private-rate');
	await subscribed(rateB);
	let relayed = 0;
	b.channel('private-rate').bind('client-burst', () => { relayed++; });
	const rateA = a.subscribe('private-rate');
	await subscribed(rateA);
	const rateErr = nextError(a, '4301');
	for (let i = 0; i < 100; i++) rateA.trigger('client-burst', { i });
	const rateCode = await rateErr;
	if (rateCode !== 4301) fail('client events past the rate: code ' + rateCode);
	got = next(rateB, 'after');
	await sendOnce(got, () => apiA.trigger('private-rate', 'after', {}), 'event after the burst');
	if (relayed >= 100 || a.connection.state !== 'connected') fail(`after 4301: ${relayed} of 100 relayed, state ${a.connection.state}`);
	const pubErr = nextError(a, '4302', [4301]); // the burst's last 4301s may still come
	pubA.trigger('client-public', {});
	if ((await pubErr) !== 4302 || a.connection.state !== 'connected') fail('client event on a public channel');
	ok(`pusher:error 4301 past the client-event rate (${relayed} of 100 relayed) and 4302 on a public channel; pusher-js stays connected`);

	// Terminating a user's connections (on the other node's API): pusher-js
	// gets 4009 and, as the protocol says for 4000-4099, does not reconnect.
	const d = client(cfg.hostA, 'dave');
	await connected(d);
	d.signin();
	await within(new Promise((res) => { const t = setInterval(() => { if (d.user.user_data) { clearInterval(t); res(); } }, 20); }), 'signin of d');
	const dStates = states(d);
	const dErr = nextError(d, 'terminate');
	const dProbe = client(cfg.hostA, 'dave');
	await connected(dProbe);
	await apiB.terminateUserConnections(d.user.user_data.id);
	const dCode = await dErr;
	await within(new Promise((res) => { if (d.connection.state === 'disconnected') res(); d.connection.bind('disconnected', res); }), 'disconnected after terminate');
	if (dCode !== 4009) fail('terminate: code ' + dCode);
	if (dProbe.connection.state !== 'connected') fail('terminate closed a connection of no signed-in user');
	dProbe.disconnect();
	ok('terminateUserConnections (SDK, other node): pusher-js gets 4009 and is disconnected');

	// 4100: a server with room for one connection; pusher-js backs off and
	// connects once the room is free.
	if (cfg.fullHost) {
		const first = client(cfg.fullHost, '');
		await connected(first);
		const second = client(cfg.fullHost, '');
		const fullCode = await nextError(second, '4100');
		if (fullCode !== 4100) fail('over capacity: code ' + fullCode);
		first.disconnect();
		await connected(second);
		second.disconnect();
		ok('pusher:error 4100 when the server is full; pusher-js backs off and connects when there is room');
	}

	if (cfg.webhookPort) {
		await within(webhook('member_added', 'presence-lobby', (e) => e.user_id === 'bob'), 'member_added webhook');
		await within(webhook('member_removed', 'presence-lobby', (e) => e.user_id === 'bob'), 'member_removed webhook');
		const ce = await within(webhook('client_event', 'private-room', (e) => e.event === 'client-typing'), 'client_event webhook');
		if (ce.socket_id !== a.connection.socket_id || JSON.parse(ce.data).who !== 'alice') fail('client_event webhook ' + JSON.stringify(ce));
		const cw = await within(webhook('client_event', 'presence-lobby', (e) => e.event === 'client-wave'), 'presence client_event webhook');
		if (cw.user_id !== 'alice') fail('presence client_event webhook ' + JSON.stringify(cw));
		await within(webhook('cache_miss', 'cache-empty'), 'cache_miss webhook');
		ok('webhooks member_added, member_removed, client_event (with user_id on presence) and cache_miss verified by the SDK');
	}

	a.disconnect(); b.disconnect();
	if (cfg.webhookPort) { await within(webhook('channel_vacated', 'news'), 'channel_vacated webhook'); ok('webhook channel_vacated verified by the SDK'); }
	if (cfg.webhookPort) {
		// Each of these happened once in the cluster: one webhook each,
		// whichever node saw it (on two nodes both send webhooks).
		const once = [['channel_occupied', 'news'], ['channel_vacated', 'news'], ['member_added', 'presence-lobby', (e) => e.user_id === 'bob'],
			['member_removed', 'presence-lobby', (e) => e.user_id === 'bob'], ['client_event', 'private-room', (e) => e.event === 'client-typing'],
			['client_event', 'presence-lobby', (e) => e.event === 'client-wave'], ['cache_miss', 'cache-empty']];
		for (const [name, channel, pred = () => true] of once) {
			const n = hooks.filter((e) => e.name === name && e.channel === channel && pred(e)).length;
			if (n !== 1) fail(`webhook ${name} on ${channel} came ${n} times, want once`);
		}
		ok('webhooks channel_occupied, channel_vacated, member_added, member_removed, client_event and cache_miss came once each');
	}
	if (dStates.includes('connecting')) fail('pusher-js reconnected after terminate: ' + dStates.join());
	ok('pusher-js did not reconnect after 4009 (states ' + dStates.join() + ')');
	auth.close(); hookServer?.close();
	console.log('done');
	process.exit(0);
} catch (e) {
	fail(e.stack ?? String(e));
}
