# Per-target defaults for PipeStudio's own targets (no directory-scope flags).
function(ps_target_defaults target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor>)
  # GCC 12 (Debian 12's compiler) at -O3 reports bogus -Wrestrict overlaps ("accessing
  # 9223372036854775810 or more bytes at offset -3") inside libstdc++'s inlined
  # std::operator+(const char*, std::string&&), e.g. `"[" + joined()` (GCC bug 105651, a relative of
  # 105329). Suppressed for GCC 12 only (widen the range if a newer GCC shows the same) and only in
  # the Release configuration (-O3, the README's quickstart), the one that shows them; -O2 builds
  # (ci, dev) keep -Wrestrict, so CI still catches real overlaps.
  target_compile_options(${target} PRIVATE
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>,$<VERSION_GREATER_EQUAL:$<CXX_COMPILER_VERSION>,12>,$<VERSION_LESS:$<CXX_COMPILER_VERSION>,13>,$<CONFIG:Release>>:-Wno-restrict>)
  # Unity builds (the ci, fuzz and tsan presets: CMAKE_UNITY_BUILD) paste several .cpp files into
  # one; GCC then takes a file's anonymous-namespace test fixture for one declared in a header
  # (-Wsubobject-linkage). Names at namespace scope in anonymous namespaces must differ between the
  # files of one target (a clash is a compile error there, never silent).
  if(CMAKE_UNITY_BUILD)
    target_compile_options(${target} PRIVATE
      $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-subobject-linkage>)
  endif()
  if(PS_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
  if(PS_SANITIZE)
    list(JOIN PS_SANITIZE "," _sanitizers)
    target_compile_options(${target} PRIVATE -fsanitize=${_sanitizers} -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE -fsanitize=${_sanitizers})
    # UBSan's default is to print and go on, which a test run would pass: make every report fatal
    # (ASan and TSan reports already are).
    if("undefined" IN_LIST PS_SANITIZE)
      target_compile_options(${target} PRIVATE -fno-sanitize-recover=all)
    endif()
  endif()
  # Coverage feedback for libFuzzer in every PipeStudio library the fuzz targets reach
  # (tests/fuzz links the fuzzer's main itself with -fsanitize=fuzzer).
  if(PS_BUILD_FUZZERS)
    target_compile_options(${target} PRIVATE -fsanitize=fuzzer-no-link)
  endif()
endfunction()

# ps_core must stay free of Qt and CUDA (ARCHITECTURE.md). Checked on the direct and transitive
# link interface of the target at configure time; tests/core_purity checks the sources.
function(ps_assert_no_qt_or_cuda target)
  get_target_property(_libs ${target} LINK_LIBRARIES)
  get_target_property(_ilibs ${target} INTERFACE_LINK_LIBRARIES)
  foreach(_lib IN LISTS _libs _ilibs)
    if(_lib MATCHES "^(Qt[56]?::|CUDA::|QCustomPlot)" OR _lib MATCHES "cuda|cupti|nccl")
      message(FATAL_ERROR "${target} must not link Qt or CUDA, but links '${_lib}'")
    endif()
    if(TARGET ${_lib} AND _lib MATCHES "^ps_")
      ps_assert_no_qt_or_cuda(${_lib})
    endif()
  endforeach()
endfunction()
