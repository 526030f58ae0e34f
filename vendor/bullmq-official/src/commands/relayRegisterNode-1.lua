--[[
  Registers (or refreshes) a relay node, its liveness lease and its info.
  Input:
    KEYS[1] nodes key ({base}:nodes)
    ARGV[1] base key
    ARGV[2] node id
    ARGV[3] lease duration (ms)
    ARGV[4] node info (JSON, opaque to the script)
    ARGV[5] layout version of the caller
    ARGV[6] max inbox length
  Output:
    1 - Registered.
    0 - Old subscriptions still being pruned; retry before registering.
   -5 - Invalid id.
   -6 - The namespace uses a different data layout version.
]]
local rcall = redis.call
--[[
  Relay subscription index and node cleanup.
  All subscriptions of a namespace live in one sorted set, {base}:subs, with
  every member at score 0 so members are ordered (and paginated) by value.
  Each subscription is stored under two views, and each subscribed pattern
  under two more:
    n|{node}|{endpoint}|{pattern}   subscriptions of a node or endpoint
    p|{pattern}|{node}|{endpoint}   subscribers of a pattern
    t|{pattern}                     patterns with at least one subscriber
    w|{root}|{pattern}              wildcard patterns by literal root ("*"
                                    for patterns starting with a wildcard)
  "|" can't appear in ids or patterns, so a prefix range selects one view.
]]
--[[
  Relay topic grammar, shared by every relay script.
  Topics are dot-separated keypaths, e.g. "queues.emails.jobs.42.progress".
    - Segments match [A-Za-z0-9_:%-]+ (other characters must be
      percent-encoded by the caller).
    - Max 512 characters and 16 segments.
  Patterns may also contain wildcards:
    - "*" matches exactly one segment.
    - ">" matches one or more trailing segments (last segment only).
  Node and endpoint ids match [A-Za-z0-9_-]{1,64}.
]]
local function splitRelayTopic(value)
  local segments = {}
  local start = 1
  while true do
    local dot = string.find(value, ".", start, true)
    if not dot then
      segments[#segments + 1] = string.sub(value, start)
      return segments
    end
    segments[#segments + 1] = string.sub(value, start, dot - 1)
    start = dot + 1
  end
end
-- Returns the segments of a valid topic (or pattern), or nil if invalid.
local function parseRelayTopic(value, allowWildcards)
  if type(value) ~= "string" or #value == 0 or #value > 512 then
    return nil
  end
  local segments = splitRelayTopic(value)
  local count = #segments
  if count > 16 then
    return nil
  end
  for i = 1, count do
    local segment = segments[i]
    if allowWildcards and segment == "*" then
      -- valid
    elseif allowWildcards and segment == ">" then
      if i ~= count then
        return nil
      end
    elseif not string.match(segment, "^[%w_:%%%-]+$") then
      return nil
    end
  end
  return segments
end
local function matchRelayTopic(patternSegments, topicSegments)
  local topicCount = #topicSegments
  for i = 1, #patternSegments do
    local segment = patternSegments[i]
    if segment == ">" then
      return topicCount >= i
    end
    if i > topicCount then
      return false
    end
    if segment ~= "*" and segment ~= topicSegments[i] then
      return false
    end
  end
  return #patternSegments == topicCount
end
-- Index bucket of a pattern: its literal root, or "*" for wildcard roots.
local function getRelayPatternRoot(patternSegments)
  local root = patternSegments[1]
  if root == "*" or root == ">" then
    return "*"
  end
  return root
end
local function hasRelayWildcards(segments)
  for i = 1, #segments do
    if segments[i] == "*" or segments[i] == ">" then
      return true
    end
  end
  return false
end
local function isValidRelayId(id)
  return type(id) == "string" and #id > 0 and #id <= 64 and
    string.match(id, "^[%w_%-]+$") ~= nil
end
-- Lexicographic range (for ZRANGEBYLEX/ZLEXCOUNT) of the members starting
-- with "prefix".
local relayRangeEnd = string.char(255)
local function relayRange(prefix)
  return "[" .. prefix, "[" .. prefix .. relayRangeEnd
end
local function relayHasMember(key, prefix)
  local min, max = relayRange(prefix)
  return #rcall("ZRANGEBYLEX", key, min, max, "LIMIT", 0, 1) > 0
end
--[[
  Removes one subscription, and the pattern's views once it has no
  subscribers left.
  Returns 1 if the subscription existed, 0 otherwise.
]]
local function removeRelaySubscription(baseKey, nodeId, endpointId, pattern)
  local subsKey = baseKey .. ":subs"
  local removed = rcall("ZREM", subsKey,
    "n|" .. nodeId .. "|" .. endpointId .. "|" .. pattern,
    "p|" .. pattern .. "|" .. nodeId .. "|" .. endpointId)
  if not relayHasMember(subsKey, "p|" .. pattern .. "|") then
    rcall("ZREM", subsKey, "t|" .. pattern)
    local segments = parseRelayTopic(pattern, true)
    if segments and hasRelayWildcards(segments) then
      rcall("ZREM", subsKey,
        "w|" .. getRelayPatternRoot(segments) .. "|" .. pattern)
    end
  end
  return removed > 0 and 1 or 0
end
-- Splits a "{endpoint}|{pattern}" suffix of an n| member.
local function splitRelayEndpointPattern(value)
  local bar = string.find(value, "|", 1, true)
  return string.sub(value, 1, bar - 1), string.sub(value, bar + 1)
end
-- Returns the number of removed subscriptions.
local function removeRelayEndpoint(baseKey, nodeId, endpointId)
  local prefix = "n|" .. nodeId .. "|" .. endpointId .. "|"
  local min, max = relayRange(prefix)
  local members = rcall("ZRANGEBYLEX", baseKey .. ":subs", min, max)
  for i = 1, #members do
    removeRelaySubscription(baseKey, nodeId, endpointId,
      string.sub(members[i], #prefix + 1))
  end
  return #members
end
--[[
  Makes a node unroutable immediately: its inbox and record are freed, and
  its subscriptions are queued in {base}:cleanup for bounded pruning.
]]
local function removeRelayNode(baseKey, nodesKey, nodeId, now)
  local removed = rcall("ZREM", nodesKey, nodeId)
  rcall("ZREM", baseKey .. ":started", nodeId)
  rcall("UNLINK", baseKey .. ":" .. nodeId .. ":inbox", baseKey .. ":" .. nodeId .. ":node")
  if relayHasMember(baseKey .. ":subs", "n|" .. nodeId .. "|") then
    rcall("ZADD", baseKey .. ":cleanup", now, nodeId)
  end
  return removed
end
-- Prunes up to "budget" subscriptions of a removed node; returns the budget
-- left (always consuming at least 1, so callers make progress).
local function pruneRelayNode(baseKey, nodeId, budget)
  local prefix = "n|" .. nodeId .. "|"
  local min, max = relayRange(prefix)
  local members = rcall("ZRANGEBYLEX", baseKey .. ":subs", min, max,
    "LIMIT", 0, budget)
  for i = 1, #members do
    local endpointId, pattern =
      splitRelayEndpointPattern(string.sub(members[i], #prefix + 1))
    removeRelaySubscription(baseKey, nodeId, endpointId, pattern)
  end
  if #members < budget then
    rcall("ZREM", baseKey .. ":cleanup", nodeId)
  end
  return budget - math.max(1, #members)
end
-- Prunes removed nodes, oldest first, sharing one work budget.
local function pruneRelayNodes(baseKey, budget)
  while budget > 0 do
    local next = rcall("ZRANGE", baseKey .. ":cleanup", 0, 0)
    if #next == 0 then
      return
    end
    budget = pruneRelayNode(baseKey, next[1], budget)
  end
end
--[[
  Keeps every key of a relay namespace expiring on its own, so a namespace
  whose nodes all vanish leaves nothing behind, even if no other node ever
  sweeps it:
    - node records and inboxes expire with their node's lease;
    - routing keys (nodes, started, subs, cleanup) with the longest lease;
    - :mid and :layout with the longest lease or the last retained message,
      whichever ends later;
    - retained messages and their index with their own expiry.
  Called after every change to the node set or to retained messages.
]]
--[[
  Time helpers shared by the relay scripts. Scripts use the server clock, so
  leases and expiries don't depend on the clocks of the nodes.
]]
local function getRelayTime()
  local time = rcall("TIME")
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
-- Highest score of a sorted set (0 if empty): the latest lease or expiry.
local function getRelayLastScore(key)
  local last = rcall("ZRANGE", key, -1, -1, "WITHSCORES")
  return last[2] and tonumber(last[2]) or 0
end
local function refreshRelayNamespace(baseKey, nodesKey, now)
  local nodesUntil = getRelayLastScore(nodesKey)
  local routingKeys = { nodesKey, baseKey .. ":started", baseKey .. ":subs",
    baseKey .. ":cleanup" }
  if nodesUntil > now then
    for i = 1, #routingKeys do
      rcall("PEXPIREAT", routingKeys[i], nodesUntil)
    end
  else
    -- No live node: every subscription left belongs to a dead one.
    rcall("UNLINK", unpack(routingKeys))
  end
  local keepUntil = math.max(nodesUntil,
    getRelayLastScore(baseKey .. ":retained"))
  if keepUntil > now then
    rcall("PEXPIREAT", baseKey .. ":mid", keepUntil)
    rcall("PEXPIREAT", baseKey .. ":layout", keepUntil)
  else
    rcall("UNLINK", baseKey .. ":mid", baseKey .. ":layout")
  end
end
local baseKey = ARGV[1]
local nodeId = ARGV[2]
local leaseMs = tonumber(ARGV[3])
local nodeKey = baseKey .. ":" .. nodeId .. ":node"
if not isValidRelayId(nodeId) then
  return -5
end
local layout = rcall("HGET", baseKey .. ":layout", "layout")
if layout and layout ~= ARGV[5] then
  return -6
end
local now = getRelayTime()
-- Never reactivate stale routes, including when recovering before a sweep.
-- Each retry releases Redis after at most 100 subscriptions.
if rcall("EXISTS", nodeKey) == 0 then
  removeRelayNode(baseKey, KEYS[1], nodeId, now)
  refreshRelayNamespace(baseKey, KEYS[1], now)
  pruneRelayNode(baseKey, nodeId, 100)
  if rcall("ZSCORE", baseKey .. ":cleanup", nodeId) then
    return 0
  end
end
rcall("HSET", baseKey .. ":layout", "layout", ARGV[5])
rcall("ZADD", KEYS[1], now + leaseMs, nodeId)
rcall("ZADD", baseKey .. ":started", "NX", now, nodeId)
rcall("HSET", nodeKey, "info", ARGV[4], "hb", now)
rcall("HSET", nodeKey, "maxLen", tonumber(ARGV[6]) or 10000)
rcall("PEXPIRE", nodeKey, leaseMs)
rcall("PEXPIRE", baseKey .. ":" .. nodeId .. ":inbox", leaseMs)
refreshRelayNamespace(baseKey, KEYS[1], now)
return 1
