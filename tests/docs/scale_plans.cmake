# The plans docs/plans/ holds: GPT-2 124M and GPT configurations of 1.3B and
# 7B parameters (samples/gpt2/model.cpp's gpt_sized_train) planned for 8, 64
# and 512 H100s of 80 GB (h100-nvlink within one node, h100-ib beyond), as
# `--mesh auto --plan` prints them. docs/guide/planning.md compares them with
# the splits published Megatron-LM runs use.
#
#   cmake -DGENERATOR=path/to/gpt2 generator -DPLANS=docs/plans -DMODE=check|write
#         [-DONLY=file] [-DSKIP=file|file...] -P scale_plans.cmake
#
# MODE check (the test docs_scale_plans) fails naming the plans that are
# not their file's text; MODE write (the target docs_plans_update) rewrites
# the files. The test skips the two slowest (1.3B and 7B on 8 GPUs: minutes
# each, their gradient accumulation traced micro-batch by micro-batch), which
# docs_plans_update still writes.
cmake_minimum_required(VERSION 3.20)
get_filename_component(generator_name "${GENERATOR}" NAME)
set(batch "batch=512")
set(models
    "gpt2_124m|layers=12|embed=768|heads=12|context=1024"
    "gpt_1.3b|layers=24|embed=2048|heads=16|context=2048"
    "gpt_7b|layers=32|embed=4096|heads=32|context=2048")
set(machines "8|h100-nvlink" "64|h100-ib" "512|h100-ib")
set(stale "")
foreach(model IN LISTS models)
  string(REPLACE "|" ";" fields "${model}")
  list(POP_FRONT fields name)
  set(options "")
  foreach(o IN LISTS fields ITEMS ${batch})
    list(APPEND options --option ${o})
  endforeach()
  foreach(machine IN LISTS machines)
    string(REPLACE "|" ";" m "${machine}")
    list(GET m 0 devices)
    list(GET m 1 kind)
    set(file ${name}_h100_${devices}.txt)
    if(DEFINED ONLY AND NOT file STREQUAL ONLY)
      continue()
    endif()
    string(REPLACE "|" ";" skip "${SKIP}")
    if(file IN_LIST skip)
      continue()
    endif()
    # 72 GiB of an H100's 80 GB for the step: the rest is the CUDA context,
    # NCCL's buffers and cuBLAS's workspace.
    execute_process(COMMAND ${GENERATOR} --program gpt_sized_train --mesh auto --devices ${devices}
                            --machine ${kind} --memory 72GiB --backend cuda ${options} --plan
                    RESULT_VARIABLE rc OUTPUT_VARIABLE text ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "${file}: the generator failed (${rc}):\n${err}")
    endif()
    set(header "# ${name} on ${devices} H100s: ${generator_name} --program gpt_sized_train --mesh auto --devices ${devices} --machine ${kind} --memory 72GiB --backend cuda")
    foreach(o IN LISTS fields ITEMS ${batch})
      string(APPEND header " --option ${o}")
    endforeach()
    set(text "${header} --plan\n# (written by tests/docs/scale_plans.cmake: ninja docs_plans_update)\n\n${text}")
    if(MODE STREQUAL "write")
      file(WRITE ${PLANS}/${file} "${text}")
      message(STATUS "wrote ${PLANS}/${file}")
    else()
      set(old "")
      if(EXISTS ${PLANS}/${file})
        file(READ ${PLANS}/${file} old)
      endif()
      if(NOT old STREQUAL text)
        list(APPEND stale ${file})
      endif()
    endif()
  endforeach()
endforeach()
if(stale)
  string(JOIN ", " stale ${stale})
  message(FATAL_ERROR "docs/plans is not what the planner prints now: ${stale}; run `ninja docs_plans_update` "
                      "in the build folder and review the diff (the plans and docs/guide/planning.md's "
                      "comparison with Megatron-LM)")
endif()
