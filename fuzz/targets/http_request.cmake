# The HTTP target runs `qkv serve`'s routes (server/http.cpp, configure_routes) over cpp-httplib.
target_link_libraries(qkv_fuzz_replay_${QKV_FUZZ_TARGET} PRIVATE qkv_server)
if(TARGET fuzz_${QKV_FUZZ_TARGET})
  target_link_libraries(fuzz_${QKV_FUZZ_TARGET} PRIVATE qkv_server)
endif()
