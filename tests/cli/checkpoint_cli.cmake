# `tessera checkpoint convert` (label `cli`): a short sharded training run
# writes the checkpoint, convert turns it into one file, a new run starts
# from that file, and wrong command lines fail naming the problem.
set(_ckpt_out "${CMAKE_CURRENT_BINARY_DIR}/checkpoint")
set(_ckpt_quickstart "${PROJECT_SOURCE_DIR}/examples/quickstart.toml")
set(_ckpt_short --set run.steps=2 --set run.world_size=2 --set model.layers=1
    --set optimizer.warmup_steps=1)

tessera_cli_test(checkpoint_train_sharded
  ARGS train "${_ckpt_quickstart}" ${_ckpt_short} --set strategy.name=zero3
       --set "checkpoint.dir=${_ckpt_out}/sharded" --set checkpoint.format=sharded
  STDOUT "strategy: zero3 on 2 ranks|checkpoint: [^\n]*step-00000002/index\\.json")
set_tests_properties(cli.checkpoint_train_sharded PROPERTIES FIXTURES_SETUP cli_sharded_ckpt)

tessera_cli_test(checkpoint_convert
  ARGS checkpoint convert --to full "${_ckpt_out}/sharded" "${_ckpt_out}/full.safetensors"
  STDOUT "^converted [^\n]*step-00000002/index\\.json [(]2 ranks[)] -> [^\n]*full\\.safetensors: [0-9]+ tensors")
set_tests_properties(cli.checkpoint_convert PROPERTIES
  FIXTURES_REQUIRED cli_sharded_ckpt FIXTURES_SETUP cli_converted_ckpt)

tessera_cli_test(checkpoint_init_from_converted
  ARGS train "${_ckpt_quickstart}" ${_ckpt_short} --set "model.init=${_ckpt_out}/full.safetensors"
  STDOUT "initial weights: [^\n]*full\\.safetensors|summary: steps 1-2")
set_tests_properties(cli.checkpoint_init_from_converted PROPERTIES
  FIXTURES_REQUIRED cli_converted_ckpt)

tessera_cli_test(checkpoint_convert_missing_input
  ARGS checkpoint convert --to full "${_ckpt_out}/absent" "${_ckpt_out}/never.safetensors"
  RC 1 STDERR "^tessera: error: checkpoint: '[^\n]*absent' does not exist")
tessera_cli_test(checkpoint_convert_bad_target
  ARGS checkpoint convert --to half "${_ckpt_out}/sharded" "${_ckpt_out}/never.safetensors"
  RC 2 STDERR "^tessera: error: checkpoint convert: unknown --to 'half' [(]valid values: full[)]")
tessera_cli_test(checkpoint_convert_without_target
  ARGS checkpoint convert "${_ckpt_out}/sharded" "${_ckpt_out}/never.safetensors"
  RC 2 STDERR "^tessera: error: checkpoint convert: --to is required [(]valid values: full[)]")
tessera_cli_test(checkpoint_without_subcommand ARGS checkpoint
  RC 2 STDERR "^tessera: error: missing command [(]use checkpoint convert")
