-- The end of `hash_lib()` around hash.lua in the exclusive lock's scripts
-- (see kind/sources.rs): the functions they call on a hash.
return {
  writer_meets_hash = writer_meets_hash,
  hash_release = hash_release,
  hash_renew = hash_renew,
  hash_fence = hash_fence,
  hash_inspect = hash_inspect,
  hash_force = hash_force,
}
