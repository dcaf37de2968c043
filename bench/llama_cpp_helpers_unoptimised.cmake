# Included after llama.cpp's project() by bench/build_llama_cpp.sh
# (CMAKE_PROJECT_INCLUDE). The helper libraries the peers' tools link,
# llama-common (argument parsing, chat templates, downloads) and the
# cpp-httplib it carries, are over half of llama.cpp's compile time and none
# of what the peers measure or compare: they compile at -O0, about 2.3x
# faster. libllama and ggml, whose speed llama-bench times and whose
# arithmetic the peer tests check, keep Release's -O3.
if(NOT COMMAND midtune_unoptimised_helpers)
  function(midtune_unoptimised_helpers)
    foreach(target llama-common cpp-httplib)
      if(TARGET ${target})
        # After Release's -O3 on the command line, so this one wins.
        target_compile_options(${target} PRIVATE -O0)
      endif()
    endforeach()
  endfunction()
  # At the end of the top-level directory, when every target exists.
  cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL midtune_unoptimised_helpers)
endif()
