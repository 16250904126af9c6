select 'café' as word;
